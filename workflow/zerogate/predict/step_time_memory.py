"""The step-time ledger's memory traffic: bytes read and written by DeepSpeed's copies, norms and in-place
updates, priced over a memory's bandwidth (:func:`memory_bound`) or, on the CPU accelerator, at the
micro-benchmarks' rates by how each op writes (:class:`Traffic`, :func:`memory_traffic`).

On the host an op that writes a tensor it allocates (``torch.cat``, a flatten, a dtype-changing ``.to``)
first touches fresh pages and runs at the operator chains' cost per byte (every chain's op allocates its
output: zerogate.runtime.operator_dispatch); an op that writes a buffer already there (``copy_`` into it, an
in-place ``mul_``, ``div_`` or ``add_``) or only reads (a norm) streams resident memory as the
micro-benchmarks' host-to-host copy does (``copy_`` between two touched buffers:
zerogate.runtime.microbench.copy_call). Measured here on the same gradients (docs/diagnostics/
diag_z0_boundary.py, docs/measurements.md): the flatten near the chains' rate, the in-place ops and the copy
back 5-10 times faster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from zerogate.config.machines import MachineDescription
from zerogate.predict import rates
from zerogate.predict.microbench_rates import REPEAT_RANGE, MeasuredRates
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_terms import Seconds, host_runs_between_products

# Where a rank's host buffers lie: Linux's default NUMA policy is local allocation, a page on the node of the
# CPU that first touches it (https://www.kernel.org/doc/html/latest/admin-guide/mm/numa_memory_policy.html); a
# rank whose threads are not bound to cores may touch all its buffers from one node.
NUMA_LOCAL = (
    "Linux's local allocation puts a page on the node of the CPU that first touches it, and ranks not bound "
    "to cores may hold all their buffers on one node (kernel doc numa_memory_policy)"
)


def ranks_on_their_nodes(setup: Setup, machine: MachineDescription) -> bool:
    """Every rank's memory on its own share of the NUMA nodes: ranks bound to cores
    (``setup.bind_cores``), as many on each node (DeepSpeed gives each rank physical cores / ranks of them and
    ``numactl -m`` the node they lie on: deepspeed/utils/numa.py get_numactl_cmd)."""
    nodes = machine.host.numa_nodes or 1
    return setup.bind_cores and setup.ranks_per_node % nodes == 0


def host_bandwidths(setup: Setup, machine: MachineDescription) -> tuple[float, float]:
    """(fastest, slowest) host memory bandwidth, GB/s, the ranks' traffic may reach: every node's, and one
    NUMA node's share where the host has several (:data:`NUMA_LOCAL`) unless the ranks are bound to theirs
    (:func:`ranks_on_their_nodes`). Needs ``memory_bandwidth_gbps``."""
    bandwidth = machine.host.memory_bandwidth_gbps
    assert bandwidth
    nodes = machine.host.numa_nodes or 1
    return bandwidth, bandwidth if ranks_on_their_nodes(setup, machine) else bandwidth / nodes


def memory_bound(
    moved_per_rank: float, setup: Setup, machine: MachineDescription, on_host: bool
) -> tuple[Seconds, str]:
    """(low, high) seconds to stream ``moved_per_rank`` bytes on every rank: over the host's memory (all
    ranks' traffic on one host's bandwidth; on a host of several NUMA nodes the high end on one node's share
    unless the ranks are bound to theirs, :func:`host_bandwidths`) or each device's (the slowest device
    deciding)."""
    if on_host:
        bandwidth = machine.host.memory_bandwidth_gbps
        if not bandwidth:
            return None, "no host memory bandwidth (host.memory_bandwidth_gbps)"
        fastest, slowest = host_bandwidths(setup, machine)
        moved = moved_per_rank * setup.ranks_per_node
        low = rates.HOST_MEMORY.seconds(moved, fastest * 1e9)[0]
        high = rates.HOST_MEMORY.seconds(moved, slowest * 1e9)[1]
        count, cpu = machine.host.numa_nodes, machine.host.cpu_model
        nodes = (
            f" (at the slow end one of its {count} NUMA nodes' {slowest:g} GB/s: {NUMA_LOCAL})"
            if slowest != fastest
            else ""
        )
        return (low, high), (
            f"{setup.ranks_per_node} rank(s) x {moved_per_rank:.4g} B over the host's {bandwidth:g} GB/s"
            f"{f' ({cpu})' if cpu else ''}{nodes} x ({rates.HOST_MEMORY.source})"
        )
    bandwidths = [g.memory_bandwidth_gbps for g in machine.gpus]
    if not all(bandwidths):
        return None, "no memory bandwidth for every device (gpus[].memory_bandwidth_gbps)"
    slowest = min(b for b in bandwidths if b)
    return rates.DEVICE_MEMORY.seconds(moved_per_rank, slowest * 1e9), (
        f"{moved_per_rank:.4g} B per rank over the slowest device's {slowest:g} GB/s x "
        f"({rates.DEVICE_MEMORY.source})"
    )


@dataclass(frozen=True)
class Traffic:
    """One rank's memory traffic, bytes read and written, keyed by the elements of the tensors each op moves
    and split by what the op writes: ``fresh``, a tensor it allocates; ``resident``, a buffer already there,
    or nothing (a reduction's reads) (module doc)."""

    fresh: Mapping[int, float] = field(default_factory=dict)
    resident: Mapping[int, float] = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return sum(self.fresh.values()) + sum(self.resident.values())

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(_merged(self.fresh, other.fresh), _merged(self.resident, other.resident))


def _merged(one: Mapping[int, float], other: Mapping[int, float]) -> dict[int, float]:
    merged = dict(one)
    for numel, moved in other.items():
        merged[numel] = merged.get(numel, 0.0) + moved
    return merged


def traffic(fresh: Mapping[int, float] | None = None, resident: Mapping[int, float] | None = None) -> Traffic:
    """A :class:`Traffic` without its empty entries (no bytes, or none on a size): each size at least one
    element."""

    def kept(moved: Mapping[int, float] | None) -> dict[int, float]:
        found: dict[int, float] = {}
        for numel, amount in (moved or {}).items():
            if amount > 0:
                found[max(1, numel)] = found.get(max(1, numel), 0.0) + amount
        return found

    return Traffic(kept(fresh), kept(resident))


def _sizes(moved: Mapping[int, float]) -> str:
    return ", ".join(f"{b:.4g} B on {n} elements" for n, b in sorted(moved.items()))


def memory_traffic(
    moved: Traffic,
    setup: Setup,
    machine: MachineDescription,
    on_host: bool,
    measured: MeasuredRates | None,
) -> tuple[Seconds, str]:
    """(low, high) seconds of one rank's memory traffic. Where the host runs a micro-step's ops one after
    another and the micro-benchmarks timed the operator chains (the CPU accelerator): the fresh bytes at the
    chains' cost per byte at each size (OperatorLines.traffic_s), the resident bytes at the host-to-host
    copy's rate (its payload crosses memory twice, read and written: bytes / (2 x rate); the chains' cost
    where no copy was timed); every rank's rates timed with the others running. Else every byte over the
    memory's bandwidth at its achievable fraction (:func:`memory_bound`)."""
    lines = None if measured is None else measured.operator_lines
    if lines is None or measured is None or not host_runs_between_products(setup, machine):
        return memory_bound(moved.total_bytes, setup, machine, on_host)
    copy = measured.copy("host_to_host", None)
    fresh = dict(moved.fresh) if copy is not None else _merged(moved.fresh, moved.resident)
    low, high = lines.traffic_s(fresh) if fresh else (0.0, 0.0)
    parts = []
    if fresh:
        what = "written fresh" if copy is not None else "fresh or resident (no host-to-host copy timed)"
        parts.append(
            f"{_sizes(fresh)} {what} at the operator chains' cost per byte by size "
            f"(OperatorLines.traffic_s); measured: {lines.source}"
        )
    resident = sum(moved.resident.values())
    if copy is not None and resident:
        low, high = low + resident / (2 * copy.high), high + resident / (2 * copy.low)
        parts.append(
            f"{resident:.4g} B in resident buffers at the host-to-host copy's rate, its payload read and "
            f"written; measured: {copy.source} ({REPEAT_RANGE})"
        )
    return (low, high), "; ".join(parts)
