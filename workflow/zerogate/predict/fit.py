"""Does a run fit a machine? One memory check per rank's device, one for the node's host RAM and one for NVMe,
each with its headroom and its three-valued verdict on the need's interval (fits, may not fit, does not fit);
what the checks cannot judge; and the largest micro-batch with which every check fits, fits for certain, and
may fit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from zerogate.config.machines import GpuDescription, MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import DOES_NOT_FIT, FITS, MAY_NOT_FIT, MemoryCheck
from zerogate.hardware import cuda_capacity
from zerogate.predict.activation_figures import Activations
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import Setup
from zerogate.predict.zero_terms import ZeroTerms, host_need_per_rank, zerogate_terms
from zerogate.units import format_bytes


def verdict(low: int, high: int, capacity: int) -> str:
    """The fit of a need known to lie in [``low``, ``high``] bytes: "fits" when its high end is within
    ``capacity``, "does not fit" when its low end is above it, "may not fit" when the capacity lies inside."""
    if high <= capacity:
        return FITS
    return DOES_NOT_FIT if low > capacity else MAY_NOT_FIT


def memory_check(what: str, rank: int | None, device: str, need: Need | int, capacity: int) -> MemoryCheck:
    """One check: ``need`` bytes (a point figure, or a Need with its interval) of ``capacity`` on ``device``
    (``rank``'s; None: the node's)."""
    need = need if isinstance(need, Need) else Need(need, need, need)
    return MemoryCheck(
        what=what,
        rank=rank,
        device=device,
        need_bytes=need.point,
        capacity_bytes=capacity,
        headroom_bytes=capacity - need.point,
        fits=capacity - need.point >= 0,
        need_low_bytes=need.low,
        need_high_bytes=need.high,
        verdict=verdict(need.low, need.high, capacity),
    )


@dataclasses.dataclass(frozen=True)
class Need:
    """What a rank's device or a node's host needs, bytes: the point figure and its interval."""

    low: int
    point: int
    high: int

    def scaled(self, factor: int) -> Need:
        return Need(self.low * factor, self.point * factor, self.high * factor)


def overall_verdict(result: list[MemoryCheck]) -> str:
    """The verdict of a run over its checks: the worst check's."""
    found = {c.verdict for c in result}
    if DOES_NOT_FIT in found:
        return DOES_NOT_FIT
    return MAY_NOT_FIT if MAY_NOT_FIT in found else FITS


def device_need(terms: ZeroTerms) -> Need:
    """A rank's device need (its device level) at the low end, the point and the high end of its terms."""
    low, high = terms.device_bounds()
    return Need(device_levels(low).device, device_levels(terms.device).device, device_levels(high).device)


def host_need(terms: ZeroTerms, on_cpu: bool) -> Need:
    """A rank's host need (host_need_per_rank) at the low end, the point and the high end of its terms."""
    low, high = terms.host_bounds()
    return Need(
        host_need_per_rank(dataclasses.replace(terms, host=low), on_cpu),
        host_need_per_rank(terms, on_cpu),
        host_need_per_rank(dataclasses.replace(terms, host=high), on_cpu),
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
    setup: Setup, machine: MachineDescription, device_need: Need | int, host_per_rank: Need | int
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
    host = (
        host_per_rank
        if isinstance(host_per_rank, Need)
        else Need(host_per_rank, host_per_rank, host_per_rank)
    )
    if machine.host.ram_total_bytes is not None:  # unknown RAM: no host check (notes() says so)
        result.append(
            memory_check(
                "host RAM",
                None,
                "host (all ranks of the node)",
                host.scaled(setup.ranks_per_node),
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
    result = device_and_host_checks(setup, machine, device_need(terms), host_need(terms, not machine.gpus))
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


def largest_micro_batches(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    activations: Activations | None = None,
    limit: int = 4096,
) -> dict[str, int]:
    """The largest micro-batch per rank, the rest of ``setup`` unchanged, with which every check's point
    need fits (``point``), every check's verdict is "fits" (``fits``: "fits up to N") and no check's is "does
    not fit" (``may_fit``: "may fit up to M"); 0 when not even one does. Doubling, then bisection: each
    candidate's activations are traced (or the formula's), and a larger micro-batch never needs less memory.
    Each candidate is checked once for all three."""
    found: dict[int, list[MemoryCheck]] = {}

    def checked(micro_batch: int) -> list[MemoryCheck]:
        if micro_batch not in found:
            variant = dataclasses.replace(setup, micro_batch=micro_batch)
            found[micro_batch] = checks(counts, variant, machine, activations)
        return found[micro_batch]

    return {
        "point": largest_accepted(lambda m: all(c.fits for c in checked(m)), limit),
        "fits": largest_accepted(lambda m: all(c.verdict == FITS for c in checked(m)), limit),
        "may_fit": largest_accepted(lambda m: all(c.verdict != DOES_NOT_FIT for c in checked(m)), limit),
    }


def largest_micro_batch(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    activations: Activations | None = None,
    limit: int = 4096,
) -> int:
    """The largest micro-batch per rank with which every check's point need fits (largest_micro_batches)."""
    return largest_micro_batches(counts, setup, machine, activations, limit)["point"]
