"""Drop one optimizer update under DeepSpeed, the way DeepSpeed drops an fp16-overflow step.

engine.step() at the accumulation boundary does bookkeeping we need (micro-step and global-step
counters, zero_grad, skipped_steps) around optimizer.step(). Skipping the whole call would leave the
engine's micro-step counter one short, so the next window's first micro-step would become the boundary.
So the boundary step runs, with the optimizer's step replaced for that one call by DeepSpeed's own
overflow clean-up: the accumulated (possibly non-finite) gradients are discarded -- under ZeRO-3 they
already sit in the partitioned fp32 buffers, on the CPU with offload -- and ``overflow`` tells the engine
not to advance the LR schedule and to count the step as skipped (engine._take_model_step).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

_ABSENT = object()


def drop_accumulated_gradients(optimizer: Any) -> None:
    if hasattr(optimizer, "_overflow_clean_up"):  # ZeRO-3 (DeepSpeedZeroOptimizer_Stage3)
        optimizer._overflow_clean_up(getattr(optimizer, "loss_scale", 1.0))
        return
    optimizer.zero_grad(set_to_none=True)  # ZeRO-1/2 and a plain torch optimizer (stage 0)
    if getattr(optimizer, "cpu_offload", False):
        optimizer.reset_cpu_buffers()
    for key in list(getattr(optimizer, "averaged_gradients", {}) or {}):
        optimizer.averaged_gradients[key] = None
        if hasattr(optimizer, "all_grad_tensors"):
            optimizer.all_grad_tensors[key] = None


@contextlib.contextmanager
def update_dropped(optimizer: Any) -> Iterator[None]:
    """Within the block, optimizer.step() discards the gradients and reports an overflow."""
    saved_step = vars(optimizer).get("step", _ABSENT)
    saved_overflow = vars(optimizer).get("overflow", _ABSENT)

    def dropped_step(*args: Any, **kwargs: Any) -> None:
        drop_accumulated_gradients(optimizer)
        optimizer.overflow = True

    optimizer.step = dropped_step
    try:
        yield
    finally:
        for name, saved in (("step", saved_step), ("overflow", saved_overflow)):
            if saved is _ABSENT:
                vars(optimizer).pop(name, None)
            else:
                setattr(optimizer, name, saved)
