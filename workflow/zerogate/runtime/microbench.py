"""Micro-benchmarks of this machine: matrix products, memory copies and the optimizer's update, each timed
on plain tensors (no model is built), each rate with its spread over repeats.

One timing loop (:func:`rate_samples`): a warm-up call, one call timed to size a batch, one untimed batch,
then a few repeats, each a batch of back-to-back calls of about ``REPEAT_S`` (sub-millisecond calls are
averaged over the batch, so the clock's resolution and the loop's own cost do not count), the device
synchronised after each batch. Each repeat gives one rate; :func:`spread_of` turns them into the
contract's median and quartiles (zerogate.robust.quartiles). What shapes and sizes to time is the caller's
(zerogate.predict.microbench); this module knows nothing of the run.

Several processes may time the same benchmarks at once, as a host's ranks run the same work at once
(zerogate.predict.microbench_together): inside :func:`in_lockstep`, every rate's warm-up starts when every
process has reached it, and its repeats start together, as many in each process as the fewest any of them
chose, so no process times a repeat alone while the others wait.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol

import torch

from zerogate.contracts.microbench import Spread
from zerogate.robust import quartiles
from zerogate.runtime.ops import build_env, keep_cpu_info

REPEATS = 5  # at most; fewer when the budget is short, never under MIN_REPEATS
MIN_REPEATS = 3  # the quartiles of fewer say nothing
REPEAT_S = 0.02  # each repeat's batch of calls lasts about this long


class Lockstep(Protocol):
    """The processes timing the same benchmarks at once (zerogate.predict.microbench_together.Peers)."""

    def agree(self, count: int) -> int:
        """Wait until every process has proposed its count; the smallest of them."""
        ...


class Alone:
    """One process timing alone: nothing to wait for."""

    def agree(self, count: int) -> int:
        return count


_lockstep: Lockstep = Alone()


@contextmanager
def in_lockstep(peers: Lockstep) -> Iterator[None]:
    """Every :func:`rate_samples` inside the block in step with ``peers``."""
    global _lockstep
    before, _lockstep = _lockstep, peers
    try:
        yield
    finally:
        _lockstep = before


def synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


class Samples(NamedTuple):
    """Each repeat's rate, and the share of its threads' cores the process had meanwhile (its CPU seconds
    over wall seconds x torch's threads: near 1 alone on the cores, lower when other processes took turns
    on them)."""

    rates: list[float]
    cpu_shares: list[float]


def rate_samples(
    operation: Callable[[], Any],
    work: float,
    budget_s: float,
    device: str = "cpu",
    repeats: int = REPEATS,
    excluded: Callable[[], float] | None = None,
) -> Samples:
    """``work`` per second of ``operation``, one rate per repeat: between MIN_REPEATS and ``repeats``
    repeats, as many as ``budget_s`` allows after the warm-up batch (and, in lockstep, as the fewest any
    process chose), each a batch of calls of about REPEAT_S (in lockstep, as many calls in every process: an
    operation with collectives between the processes must be called as often in each). ``excluded``: a
    running count of seconds (a CollectiveClock's blocked time) taken out of each repeat's seconds."""
    synchronize = synchronizer(device)
    _lockstep.agree(0)  # every process at this rate
    operation()  # warm-up: thread pool, kernels, first-touch pages, optimizer state
    synchronize()
    started = time.perf_counter()
    operation()
    synchronize()
    one = max(time.perf_counter() - started, 1e-7)
    calls = _lockstep.agree(max(1, math.floor(REPEAT_S / one)))
    count = min(repeats, max(MIN_REPEATS, math.floor(budget_s / (calls * one)) - 1))
    for _ in range(calls):  # one untimed batch: a cold first call sized the batch, the rest are warm
        operation()
    synchronize()
    count = _lockstep.agree(count)  # the repeats start together, as many in every process
    samples = Samples([], [])
    threads = torch.get_num_threads()
    outside = excluded or (lambda: 0.0)
    for _ in range(count):
        started, cpu_started, left_out = time.perf_counter(), time.process_time(), outside()
        for _ in range(calls):
            operation()
        synchronize()
        wall = time.perf_counter() - started
        samples.rates.append(work * calls / (wall - (outside() - left_out)))
        samples.cpu_shares.append((time.process_time() - cpu_started) / (wall * threads))
    return samples


def spread_of(samples: Samples) -> Spread:
    """The contract's spread of the repeats' rates, with the median share of the cores they had."""
    q1, median, q3 = quartiles(samples.rates)
    return Spread(
        median=median,
        q1=q1,
        q3=q3,
        samples=samples.rates,
        cpu_share=round(quartiles(samples.cpu_shares)[1], 3),
    )


# --- matrix products ----------------------------------------------------------------------------------


def product_call(
    kind: str,
    tokens: int,
    in_features: int,
    out_features: int,
    dtype: torch.dtype,
    device: str,
    pool: torch.Tensor | None = None,
) -> Callable[[], Any]:
    """One of a linear layer's three products as autograd runs them (W: out x in, contiguous):
    forward ``linear(x, W)`` (x: tokens x in), backward_input ``dy @ W``, backward_weight ``dy^T @ x``
    (dy: tokens x out). torch's profiler shows these aten::mm shapes for F.linear's forward and
    backward (torch/csrc/autograd/FunctionsManual.cpp, mm_mat1_backward and mm_mat2_backward).

    With ``pool`` (a flat buffer of ``dtype`` on ``device``, :func:`operand_pool`) each call takes its
    operands from the next slice of the pool, cycling through it, so no call finds them in cache from the
    last: a step's products each read a different layer's weights and activations. Without it every call
    reads the same operands (random), cache-warm after the first."""
    weight_shape = (out_features, in_features)
    operand_shapes = {
        "forward": ((tokens, in_features), weight_shape),
        "backward_input": ((tokens, out_features), weight_shape),
        "backward_weight": ((tokens, out_features), (tokens, in_features)),
    }
    if kind not in operand_shapes:
        raise KeyError(f"no product {kind!r}: forward, backward_input or backward_weight")
    first, second = operand_shapes[kind]
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = {
        "forward": torch.nn.functional.linear,
        "backward_input": torch.Tensor.mm,
        "backward_weight": lambda dy, x: dy.t().mm(x),
    }[kind]
    if pool is None:
        generator = torch.Generator(device=device).manual_seed(0)
        a, b = (torch.randn(*size, generator=generator, device=device).to(dtype) for size in (first, second))
        return lambda: product(a, b)
    operands = itertools.cycle(_operand_sets(pool, first, second))

    def call() -> torch.Tensor:
        return product(*next(operands))

    return call


def operand_pool(size_bytes: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A flat buffer of ``size_bytes`` in ``dtype`` for :func:`product_call` to cycle its operands through,
    filled with a small constant (the values do not change a product's speed; a constant fills in a fraction
    of the time random numbers take)."""
    return torch.full((max(1, size_bytes // dtype.itemsize),), 0.01, dtype=dtype, device=device)


def _operand_sets(
    pool: torch.Tensor, first: tuple[int, ...], second: tuple[int, ...]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive views of ``pool`` shaped ``first`` and ``second``, as many pairs as it holds (at least
    one: for a pool smaller than one pair, a buffer of one pair)."""
    size_a, size_b = math.prod(first), math.prod(second)
    pair = size_a + size_b
    if pool.numel() < pair:
        pool = operand_pool(pair * pool.element_size(), pool.dtype, str(pool.device))
    return [
        (
            pool[start : start + size_a].view(first),
            pool[start + size_a : start + pair].view(second),
        )
        for start in range(0, pool.numel() - pair + 1, pair)
    ]


# (m, n, k) of each product of a linear layer with these widths on ``tokens`` rows: (m x k) @ (k x n).
def product_dims(kind: str, tokens: int, in_features: int, out_features: int) -> tuple[int, int, int]:
    return {
        "forward": (tokens, out_features, in_features),
        "backward_input": (tokens, in_features, out_features),
        "backward_weight": (out_features, in_features, tokens),
    }[kind]


# --- memory copies ------------------------------------------------------------------------------------


def copy_call(route: str, size_bytes: int, pinned: bool | None, device: str = "cpu") -> Callable[[], Any]:
    """A copy of ``size_bytes`` (uint8 buffers, both touched first): host to host, or between a host buffer
    (page-locked when ``pinned``) and ``device``; blocking, as the payload must arrive."""
    host = torch.ones(size_bytes, dtype=torch.uint8, pin_memory=bool(pinned))
    if route == "host_to_host":
        target = torch.zeros_like(host)
        return lambda: target.copy_(host)
    on_device = torch.zeros(size_bytes, dtype=torch.uint8, device=device)
    if route == "host_to_device":
        return lambda: on_device.copy_(host)
    if route == "device_to_host":
        return lambda: host.copy_(on_device)
    raise KeyError(f"no copy route {route!r}: host_to_host, host_to_device or device_to_host")


# --- the optimizer's update -----------------------------------------------------------------------------


def deepspeed_cpu_adam(parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """DeepSpeed's CPU Adam (AdamW mode, fp32 states: what ZeRO's optimizer offload builds), its op loaded
    from this environment's build directory (zerogate.runtime.ops). Raises whatever loading the op
    raises."""
    os.environ.update(build_env())
    keep_cpu_info()
    # Here, not at the top: DeepSpeed reads DS_ACCELERATOR (the run's environment, set by the caller) when
    # it is imported, and the op may fail to load (the caller then falls back to torch's AdamW).
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam(parameters, lr=1e-3, adamw_mode=True, fp32_optimizer_states=True)


def update_call(implementation: str, numel: int, device: str = "cpu") -> Callable[[], Any]:
    """One optimizer step over one fp32 buffer of ``numel`` parameters with a gradient (the states made by
    the warm-up step): ``deepspeed_cpu_adam``, ``torch_adamw`` (torch.optim.AdamW, single tensor, on the
    host) or ``torch_adamw_fused`` (fused=True, on ``device``)."""
    where = "cpu" if implementation != "torch_adamw_fused" else device
    parameter = torch.nn.Parameter(torch.zeros(numel, device=where))
    parameter.grad = torch.full_like(parameter, 1e-3)
    if implementation == "deepspeed_cpu_adam":
        optimizer = deepspeed_cpu_adam([parameter])
    elif implementation == "torch_adamw":
        optimizer = torch.optim.AdamW([parameter], lr=1e-3, foreach=False)
    elif implementation == "torch_adamw_fused":
        optimizer = torch.optim.AdamW([parameter], lr=1e-3, fused=True)
    else:
        raise KeyError(f"no optimizer {implementation!r}")
    return optimizer.step
