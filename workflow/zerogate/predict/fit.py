"""Does a run fit a machine? One memory check per rank's device, one for the node's host RAM and one for NVMe,
each with its headroom; what the checks cannot judge; and the largest micro-batch with which every check
fits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from zerogate.config.machines import GpuDescription, MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import MemoryCheck
from zerogate.hardware import cuda_capacity
from zerogate.predict.activation_figures import Activations
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import Setup
from zerogate.predict.zero_terms import ZeroTerms, host_need_per_rank, zerogate_terms
from zerogate.units import format_bytes


def memory_check(what: str, rank: int | None, device: str, need: int, capacity: int) -> MemoryCheck:
    """One check: ``need`` bytes of ``capacity`` on ``device`` (``rank``'s; None: the node's)."""
    return MemoryCheck(
        what=what,
        rank=rank,
        device=device,
        need_bytes=need,
        capacity_bytes=capacity,
        headroom_bytes=capacity - need,
        fits=capacity - need >= 0,
    )


def device_capacity(gpu: GpuDescription, machine: MachineDescription) -> int:
    """The device memory a rank's allocations can reach on ``gpu``. A probed machine's is what CUDA reported
    there (zerogate.runtime.probe). A described machine states a card's memory as its maker does, the chips'
    capacity, of which the driver keeps some: there it is the CUDA capacity published for the card model
    (zerogate.hardware.CUDA_CAPACITY) where the table has it and it is less."""
    stated = gpu.memory_total_bytes
    known = cuda_capacity(gpu.name) if machine.source == "described" else None
    return stated if known is None else min(stated, known.bytes)


def device_and_host_checks(
    setup: Setup, machine: MachineDescription, device_need: int, host_per_rank: int
) -> list[MemoryCheck]:
    """One check per rank's device (GPUs: every rank needs ``device_need`` of its GPU's device_capacity, its
    GPU the machine's in rank order) and one for the node's host RAM (``host_per_rank`` x the ranks on a
    node)."""
    gpus = machine.gpus
    result = [
        memory_check(
            "device memory",
            rank,
            gpus[rank % len(gpus)].name,
            device_need,
            device_capacity(gpus[rank % len(gpus)], machine),
        )
        for rank in (range(setup.ranks) if gpus else ())
    ]
    if machine.host.ram_total_bytes is not None:  # unknown RAM: no host check (notes() says so)
        result.append(
            memory_check(
                "host RAM",
                None,
                "host (all ranks of the node)",
                host_per_rank * setup.ranks_per_node,
                machine.host.ram_total_bytes,
            )
        )
    return result


def nvme_need(terms: ZeroTerms, setup: Setup) -> int:
    """What the node swaps to NVMe: every rank's NVMe terms x the ranks on a node (0 without NVMe offload)."""
    return sum(terms.nvme.values()) * setup.ranks_per_node


def checks(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[MemoryCheck]:
    """One check per rank's device (GPUs), one for host RAM, and one for NVMe where the run swaps to NVMe
    and the machine states its capacity, each with headroom."""
    terms = zerogate_terms(counts, setup, activations)
    result = device_and_host_checks(
        setup, machine, device_levels(terms.device).device, host_need_per_rank(terms, not machine.gpus)
    )
    nvme = nvme_need(terms, setup)
    capacity = machine.host.nvme_bytes
    if nvme and capacity is not None:
        result.append(memory_check("NVMe", None, "NVMe swap space of the node", nvme, capacity))
    return result


def notes(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[str]:
    """What the checks could not judge."""
    unjudged = []
    if machine.host.ram_total_bytes is None:
        unjudged.append(
            f"{machine.name} states no host RAM (host.ram_total_bytes), so the host is not checked"
        )
    nvme = nvme_need(zerogate_terms(counts, setup, activations), setup)
    if nvme and machine.host.nvme_bytes is None:
        unjudged.append(
            f"the run swaps {format_bytes(nvme)} per node to NVMe; the machine states no NVMe capacity "
            f"(host.nvme_bytes), so that is not checked"
        )
    return unjudged


def pinned_note(counts: ModelCounts, setup: Setup, machine: MachineDescription) -> str | None:
    """Pinned host memory against RLIMIT_MEMLOCK: advice, not a refusal (CUDA's pinned allocations are
    made by the driver and need not count against the limit; mlock-based pinning does)."""
    limit = machine.host.pinned_memory_limit_bytes
    if not setup.pin_memory or not machine.gpus:
        return None
    pinned = sum(zerogate_terms(counts, setup).pinned.values()) * max(1, setup.ranks // setup.nodes)
    if limit is not None and pinned > limit:
        return (
            f"pinned host memory {format_bytes(pinned)} exceeds RLIMIT_MEMLOCK {format_bytes(limit)}: if "
            "pinning fails, raise the limit (ulimit -l) or set pin_memory false"
        )
    return f"pinned host memory {format_bytes(pinned)}" + (
        " (RLIMIT_MEMLOCK unlimited)" if limit is None else ""
    )


def largest_accepted(fits_at: Callable[[int], bool], limit: int) -> int:
    """The largest micro-batch up to ``limit`` that ``fits_at`` accepts (0: not even 1), assuming fit only
    shrinks as it grows: doubling to the first that does not fit, then bisection."""
    if not fits_at(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits_at(high):
        low, high = high, high * 2
    if high > limit:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits_at(middle) else (low, middle)
    return low


def largest_micro_batch(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    activations: Activations | None = None,
    limit: int = 4096,
) -> int:
    """The largest micro-batch per rank with which every check fits, the rest of ``setup`` unchanged; 0 when
    not even one does. Doubling, then bisection: each candidate's activations are traced (or the formula's),
    and a larger micro-batch never needs less memory."""

    def fits(micro_batch: int) -> bool:
        return all(
            c.fits
            for c in checks(counts, dataclasses.replace(setup, micro_batch=micro_batch), machine, activations)
        )

    return largest_accepted(fits, limit)
