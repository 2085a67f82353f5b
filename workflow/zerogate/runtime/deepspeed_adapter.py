"""Every private or version-sensitive DeepSpeed internal the training loop relies on, in one place.

The loop calls only the functions below; tests/unit/test_deepspeed_adapter.py runs them against a
real ZeRO-3 engine (one process, gloo, CPU accelerator), so a DeepSpeed upgrade that moves one of
these internals fails there, not in the middle of a training run.

Dropping one update. engine.step() at the accumulation boundary does bookkeeping we need (micro-step
and global-step counters, zero_grad, skipped_steps) around optimizer.step(). Skipping the whole call
would leave the engine's micro-step counter one short, so the next window's first micro-step would
become the boundary. So the boundary step runs, with the optimizer's step replaced for that one call
by DeepSpeed's own overflow clean-up: the accumulated (possibly non-finite) gradients are discarded --
under ZeRO-3 they already sit in the partitioned fp32 buffers, on the CPU with offload -- and
``overflow`` tells the engine not to advance the LR schedule and to count the step as skipped
(engine._take_model_step).

Returning to training after forward-only passes (``retrace_zero3``). ZeRO-3's parameter coordinator records
the order modules fetch their parameters in during the first pass after a reset, and from then on releases a
gathered parameter after a module's forward unless the recorded order uses it again within
``stage3_max_reuse_distance`` (``__params_to_release``). An evaluation before the first training step records
a forward without a backward; the first backward then invalidates that trace and a full one is recorded, but
``__params_to_release`` is an lru_cache keyed by (coordinator, module, position) that the invalidation does
not clear: its entries for the forward's positions, computed from the forward-only trace, stay, so for the
rest of the run every forward releases every parameter and every backward gathers each module's parameters
again, one call per module (measured on the default profile: 55 collective calls a step instead of 23, four
all-gathers per backward instead of none; docs/measurements.md). ``retrace_zero3`` invalidates the trace and
clears that cache, so the next training micro-step records its own trace and every position is computed from
it; after passes that followed a complete training trace without changing it (an evaluation during or after
training) it leaves the trace alone, so the step after them is an ordinary one.

Internals used: DeepSpeedZeroOptimizer_Stage3._overflow_clean_up, parameter_offload.get_param_coordinator(),
PartitionedParameterCoordinator._invalidate_trace / is_invalid_trace / is_complete_trace / __submodule_order /
__params_to_release, ZeRO-1/2's
averaged_gradients / all_grad_tensors / reset_cpu_buffers, optimizer.overflow, optimizer.loss_scale,
engine.was_step_applied(), engine.skipped_steps, engine.get_global_grad_norm().
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from deepspeed.runtime.zero import parameter_offload
from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator

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


def boundary_step(engine: Any, apply: bool) -> None:
    """The accumulation boundary's engine.step(): the update applied, or dropped with the counters
    advanced."""
    if apply:
        engine.step()
        return
    with update_dropped(engine.optimizer):
        engine.step()  # counters advance, the gradients are dropped, the weights are untouched


def global_grad_norm(engine: Any) -> float | None:
    """The gradient norm of the last boundary step (None where DeepSpeed has none)."""
    norm = engine.get_global_grad_norm()
    return None if norm is None else float(norm)


def update_applied(engine: Any) -> bool:
    """False when DeepSpeed itself dropped the last update (fp16 overflow, non-finite norm under ZeRO)."""
    return bool(engine.was_step_applied())


def loss_scale(engine: Any) -> float | None:
    """The fp16 loss scale; None without a loss scaler (fp32, bf16)."""
    return engine.optimizer.loss_scale if engine.fp16_enabled() else None


def skipped_steps(engine: Any) -> int:
    """DeepSpeed's own count of skipped optimizer steps (ours and its overflow skips)."""
    return int(engine.skipped_steps)


def fp16(engine: Any) -> bool:
    return bool(engine.fp16_enabled())


def parameter_count(module: Any) -> int:
    """The model's parameters, whole: ZeRO-3 leaves a partitioned parameter empty and keeps its full size
    in ``ds_numel``."""
    return int(sum(getattr(p, "ds_numel", p.numel()) for p in module.parameters()))


def _clear_release_cache() -> None:
    """Empty the lru_cache of PartitionedParameterCoordinator.__params_to_release (every coordinator's)."""
    method = PartitionedParameterCoordinator._PartitionedParameterCoordinator__params_to_release
    # instrument_w_nvtx wraps the lru_cache without functools.wraps: the cache is in its closure.
    for candidate in [method, *(cell.cell_contents for cell in (method.__closure__ or ()))]:
        if hasattr(candidate, "cache_clear"):
            candidate.cache_clear()


def _coordinator(engine: Any) -> Any:
    """ZeRO-3's parameter coordinator of ``engine``; None below stage 3."""
    offload = getattr(engine.optimizer, "parameter_offload", None)
    return None if offload is None else offload.get_param_coordinator()


def zero3_trace(engine: Any) -> Any:
    """ZeRO-3's complete fetch trace as recorded (the frozen module order, compared by identity), or None
    (below stage 3, or no complete trace): taken before forward-only passes, for :func:`retrace_zero3`."""
    coordinator = _coordinator(engine)
    if coordinator is None or not coordinator.is_complete_trace():
        return None
    return coordinator._PartitionedParameterCoordinator__submodule_order


def retrace_zero3(engine: Any, trace_before: Any) -> None:
    """Before training resumes after forward-only passes under ZeRO-3: unless the complete trace taken before
    them (``trace_before``, :func:`zero3_trace`) is still the one in use, the trace is dropped and the release
    cache cleared, so the next micro-step records a forward and backward of its own (the module's docstring).
    Passes that followed a training trace leave it in place, and the next step is an ordinary one."""
    coordinator = _coordinator(engine)
    if coordinator is None:
        return
    if trace_before is not None and zero3_trace(engine) is trace_before:
        return
    if not coordinator.is_invalid_trace():
        coordinator._invalidate_trace()
    _clear_release_cache()


def forget_zero3_engines() -> None:
    """Drop what DeepSpeed 0.19.8 keeps of a destroyed ZeRO-3 engine in module-level state, so that the
    engine, its model and its optimizer can be freed: parameter_offload.FWD_MODULE_STACK keeps the last
    module whose forward ran, and PartitionedParameterCoordinator's ``__params_to_release`` is an
    lru_cache on the class whose keys hold every coordinator and module it saw. A process that builds
    several engines one after another (zerogate.train.comms_volume) otherwise keeps every one of them:
    measured on cpu-smollm2, about 1.3 GiB per ZeRO-3 scheme until the rank was killed for memory."""
    parameter_offload.FWD_MODULE_STACK.clear()
    _clear_release_cache()
