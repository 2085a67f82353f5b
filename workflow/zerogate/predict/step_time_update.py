"""The step-time ledger's boundary terms (zerogate.predict.step_time, whose docstring says what each is and
where it comes from): the optimizer update and the gradient norm and unscale, serial after the last
micro-step."""

from __future__ import annotations

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import BOUNDARY
from zerogate.predict.floor import adam_bytes_per_param
from zerogate.predict.microbench_rates import REPEAT_RANGE, MeasuredRates, Rate
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_memory import Traffic, memory_bound, memory_traffic, traffic
from zerogate.predict.step_time_terms import (
    GRAD_ACCUMULATION_BYTES,
    OPTIMIZER,
    SERIAL,
    Seconds,
    Term,
    host_runs_between_products,
    optimizer_partition,
)
from zerogate.predict.zero_states import FP64_BYTES

# Bytes per element the unscale reads and writes (``unscale_and_clip_grads``: ``mul_`` on the fp32 partition).
UNSCALE_BYTES = 2 * GRAD_ACCUMULATION_BYTES


def norm_traffic(partition: float, largest: int, setup: Setup) -> Traffic:
    """The boundary's gradient norm over ``partition`` gradient elements, keyed by the ``largest`` gradient
    tensor it takes at once: at ZeRO 1-3 each fp32 gradient copied into a new float64 tensor (DeepSpeed's
    get_norm_dtype, zero/utils.py: fp64 on every accelerator but MPS, accelerator/abstract_accelerator.py
    is_fp64_supported; ``.to(get_norm_dtype())`` in stage3.py and stage_1_and_2.py
    ``get_grad_norm_direct``: read and written fresh) and read again for its norm (resident; the copy's size
    is zerogate.predict.zero_states.FP64_BYTES, the memory ledger's); at ZeRO-0 the engine's
    ``clip_grad_norm_`` (runtime/utils.py) takes each gradient's norm in fp32 (``.float().norm``): read once,
    resident."""
    if setup.stage == 0:
        return traffic(resident={largest: partition * GRAD_ACCUMULATION_BYTES})
    return traffic(
        {largest: partition * (GRAD_ACCUMULATION_BYTES + FP64_BYTES)}, {largest: partition * FP64_BYTES}
    )


def unscale_traffic(partition: float) -> Traffic:
    """The unscale (``unscale_and_clip_grads``; the clip at ZeRO-0): :data:`UNSCALE_BYTES` an element of the
    partition, in place (resident)."""
    return traffic(resident={int(partition): partition * UNSCALE_BYTES})


def norm_bytes(setup: Setup) -> int:
    """Bytes read and written per gradient element by the boundary's gradient norm (:func:`norm_traffic`)."""
    return int(norm_traffic(1, 1, setup).total_bytes)


def norm_bytes_per_element(setup: Setup) -> int:
    """Bytes per gradient element of the norm and the unscale together (:func:`norm_bytes` +
    :data:`UNSCALE_BYTES`)."""
    return norm_bytes(setup) + UNSCALE_BYTES


def _norm_and_unscale(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, measured: MeasuredRates | None
) -> tuple[Seconds, str]:
    """(low, high) seconds of the norm and the unscale over one rank's gradient partition, and their rates.
    The norm runs where the gradients are reduced: on the device, also with the optimizer offloaded (its
    norm is taken on the device's gradient buffer before the copy out: stage3.py
    ``_offload_grad_partition_at_boundary``, stage_1_and_2.py ``set_norm_for_param_grad_in_gpu``); the
    unscale where the optimizer's fp32 partition is (the host's with the offload)."""
    host_memory = host_runs_between_products(setup, machine)
    partition, largest = optimizer_partition(counts, setup), _largest_gradient(counts, setup)
    parts = (
        ("norm", norm_traffic(partition, largest, setup), norm_bytes(setup), host_memory),
        ("unscale", unscale_traffic(partition), UNSCALE_BYTES, host_memory or setup.offload_optimizer),
    )
    if parts[0][3] == parts[1][3]:  # one memory: the two at once
        return memory_traffic(parts[0][1] + parts[1][1], setup, machine, host_memory, measured)
    seconds: list[Seconds] = []
    rates = []
    for what, moved, per_element, on_host in parts:
        found, rate = memory_traffic(moved, setup, machine, on_host, measured)
        seconds.append(found)
        rates.append(
            f"the {what} {per_element} B an element on the {'host' if on_host else 'device'}: {rate}"
        )
    if any(found is None for found in seconds):
        return None, "; ".join(rates)
    return (sum(f[0] for f in seconds), sum(f[1] for f in seconds)), "; ".join(rates)  # type: ignore[index]


def _largest_gradient(counts: ModelCounts, setup: Setup) -> int:
    """Elements of the largest gradient tensor the boundary's norm takes one at a time: a parameter's
    partition at ZeRO-3, a parameter's gradient below it (its slice of the partition at most)."""
    largest = max(counts.numels, default=counts.total)
    return -(-largest // setup.ranks) if setup.stage == 3 else largest


def _measured_update(partition: float, setup: Setup, rate: Rate) -> tuple[Seconds, str]:
    """(low, high) seconds of the update from the micro-benchmark over one rank's partition, timed alone with
    a rank's threads: low, every rank updates at that rate at once; high, the host's ranks share what one
    rank reached (memory-bound ranks on one host's memory), at the rate's slowest repeat."""
    low, high = partition / rate.high, setup.ranks_per_node * partition / rate.low
    return (low, high), (
        f"measured: {rate.source} ({REPEAT_RANGE}); {setup.ranks_per_node} rank(s) on the host "
        "at once: between each at the measured rate and one after another"
    )


def boundary_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, measured: MeasuredRates | None = None
) -> list[Term]:
    """The optimizer update and the gradient norm and unscale, serial at the boundary (stage3.py ``step``);
    the update at the micro-benchmarks' measured rate where ``measured`` has one for its device."""
    on_host = setup.offload_optimizer or not machine.gpus
    partition = optimizer_partition(counts, setup)
    rate = None
    if measured is not None:
        rate = measured.cpu_update_param_per_s if on_host else measured.device_update_param_per_s
    adam, adam_rate = (
        _measured_update(partition, setup, rate)
        if rate is not None
        else memory_bound(partition * adam_bytes_per_param(setup.dtype_bytes), setup, machine, on_host)
    )
    norm, norm_rate = _norm_and_unscale(counts, setup, machine, measured)
    adam_name = "CPU Adam update" if on_host else "fused Adam update on the device"
    return [
        Term(
            adam_name,
            OPTIMIZER,
            BOUNDARY,
            adam,
            False,
            f"{adam_bytes_per_param(setup.dtype_bytes)} B per parameter of the partition "
            f"(zerogate.predict.floor.adam_bytes_per_param: ops/adam/cpu_adam.py -> csrc/adam Step_AVX, or "
            f"the fused multi-tensor Adam); {adam_rate}",
        ),
        Term(
            "gradient norm and unscale",
            SERIAL,
            BOUNDARY,
            norm,
            False,
            f"{norm_bytes_per_element(setup)} B per gradient element "
            "(zerogate.predict.step_time_update.norm_bytes_per_element: "
            f"stage3.py _get_norm_groups, stage_1_and_2.py scaled_global_norm, unscale_and_clip_grads; "
            f"runtime/utils.py clip_grad_norm_ at ZeRO-0); {norm_rate}",
        ),
    ]
