"""The per-module and per-parameter cost of a micro-step on the host, timed on a synthetic stack of tiny
linear layers (no model of the run is built): through a DeepSpeed engine, or in plain eager PyTorch, on the
run's device (on a GPU the stack's kernels are a few microseconds each, so a micro-step is the host's work:
the engine's hooks and the launches).

The engine runs in a world of as many ranks as the run has on the host (on the CPU accelerator; one on a
GPU), every rank timing the same stack at once: in a world of one rank DeepSpeed's partitioning and its
collectives are trivial, and the per-parameter work a rank of the run does around them is not timed. The
seconds blocked in collectives (zerogate.runtime.collective_clock, the run's own definition of
``collectives(s)``) are taken out: the ledger prices the run's collectives as terms of their own.

A stack of ``modules`` ``torch.nn.Linear(width, width)`` layers, each its own module, without a bias (one
parameter per module) or with one (two): DeepSpeed's ZeRO-3 registers its four hooks on every module it
recurses into (parameter_offload.py ``_register_deepspeed_module``); each forward and backward runs
``fetch_sub_module`` and ``release_sub_module`` of partitioned_param_coordinator.py for it, which loop over
the module's parameters (gather, partition), and ZeRO's gradient hook runs per parameter (stage3.py
``reduce_ready_partitions_and_remove_grads``; below stage 3 stage_1_and_2.py
``create_reduce_and_remove_grad_hooks``). With ``width`` a few elements the arithmetic is nothing: a
micro-step's time is the engine's fixed bookkeeping plus the per-module and per-parameter costs, what a small
model's micro-step on the CPU accelerator mostly is. One micro-step is a
forward, the loss's backward through the engine and the engine's ``step`` at a non-boundary micro-step
(DeepSpeed only counts it), timed over batches of back-to-back micro-steps (zerogate.runtime.microbench).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from zerogate.contracts.microbench import Spread
from zerogate.runtime.collective_clock import CollectiveClock
from zerogate.runtime.microbench import Samples, rate_samples, spread_of


@dataclass(frozen=True)
class StackShape:
    """A synthetic stack: ``modules`` linear layers of ``width`` x ``width`` on ``rows`` rows, each with
    ``parameters_per_module`` parameters (1: the weight; 2: the weight and a bias)."""

    modules: int
    width: int
    rows: int
    parameters_per_module: int = 1

    def __post_init__(self) -> None:
        if self.parameters_per_module not in (1, 2):
            raise ValueError(f"a linear layer has 1 or 2 parameters, not {self.parameters_per_module}")


def stack(shape: StackShape) -> torch.nn.Sequential:
    """The stack's layers, initialised from seed 0."""
    torch.manual_seed(0)
    bias = shape.parameters_per_module == 2
    return torch.nn.Sequential(
        *[torch.nn.Linear(shape.width, shape.width, bias=bias) for _ in range(shape.modules)]
    )


def eager_step(model: torch.nn.Module, rows: int, width: int) -> Callable[[], Any]:
    """One plain forward and backward of ``model`` on ``rows`` random rows on its device (the gradients
    dropped after)."""
    x = torch.randn(rows, width, device=next(model.parameters()).device)

    def step() -> None:
        model(x).sum().backward()
        for parameter in model.parameters():
            parameter.grad = None

    return step


def engine_step(engine: Any, rows: int, width: int) -> Callable[[], Any]:
    """One micro-step through a DeepSpeed engine: forward, ``engine.backward``, ``engine.step`` (not the
    boundary: the engine's accumulation is longer than the timing)."""
    # In the dtype the engine trains its module in (DeepSpeed casts it for fp16 and bf16).
    x = torch.randn(rows, width, device=engine.device, dtype=next(engine.module.parameters()).dtype)

    def step() -> None:
        loss = engine(x).sum()
        engine.backward(loss)
        engine.step()

    return step


def seconds_spread(
    step: Callable[[], Any], budget_s: float, device: str = "cpu", clock: CollectiveClock | None = None
) -> Spread:
    """Seconds per call of ``step``: the repeats of zerogate.runtime.microbench.rate_samples (calls per
    second, the device synchronised after each batch) turned into seconds per call; with ``clock``, the
    seconds it counted blocked in collectives taken out."""
    excluded = None if clock is None else (lambda: clock.blocked_s)
    samples = rate_samples(step, 1.0, budget_s, device, excluded=excluded)
    return spread_of(Samples([1.0 / rate for rate in samples.rates], samples.cpu_shares))


@contextmanager
def linear_function(zero3_linear: bool) -> Iterator[None]:
    """``torch.nn.functional.linear`` inside the block as the run's modules call it, whatever engines this
    process built before: DeepSpeed's ``zero3_linear_wrap`` where ``zero3_linear`` (a ZeRO-3 run with
    zero_optimization.memory_efficient_linear, its default: zero.Init replaces torch's function for the rest
    of the process, partition_parameters.py ``_enable_mem_efficient_linear``), torch's own otherwise
    (``torch._C._nn.linear``, which torch/nn/functional.py names ``linear``). Restored after."""
    # Here, not at the top: DeepSpeed reads DS_ACCELERATOR (the rank's environment) when it is imported.
    from deepspeed.runtime.zero.linear import zero3_linear_wrap

    functional = torch.nn.functional
    before = functional.linear
    functional.linear = zero3_linear_wrap if zero3_linear else torch._C._nn.linear
    try:
        yield
    finally:
        functional.linear = before


def time_eager(shape: StackShape, budget_s: float, zero3_linear: bool = False, device: str = "cpu") -> Spread:
    """Seconds per plain eager micro-step of the stack on ``device``, its layers calling the run's linear
    function (:func:`linear_function`)."""
    with linear_function(zero3_linear):
        return seconds_spread(eager_step(stack(shape).to(device), shape.rows, shape.width), budget_s, device)


def time_engine(
    ds_config: dict[str, Any], shape: StackShape, budget_s: float, clock: CollectiveClock | None = None
) -> Spread:
    """Seconds per micro-step of the stack through a DeepSpeed engine from ``ds_config``, the collectives'
    time ``clock`` counts taken out (a world must already be started, every rank of it timing the same
    stack: zerogate.runtime.launch.start_local_world, the clock installed before it)."""
    # Here, not at the top: DeepSpeed reads DS_ACCELERATOR (the rank's environment, set by the rule's
    # script) when it is imported.
    import deepspeed

    model = stack(shape)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    try:
        step = engine_step(engine, shape.rows, shape.width)
        return seconds_spread(step, budget_s, str(engine.device), clock)
    finally:
        engine.destroy()
