"""The catalogue of host CPUs (config/host_cpus.yaml): each CPU's names and its memory, as channels x the
fastest transfer rate the vendor rates it for x 8 bytes a transfer, every figure with a source a reader can
open. The step-time ledger prices the host's memory traffic (CPU Adam, the unscale, the offload's copies) over
``host.memory_bandwidth_gbps`` (zerogate.predict.step_time_memory.memory_bound); a published row that names
its host CPU (zerogate.bench.step_time_rows) and a plan given ``host_cpu`` (zerogate.config.plan_request) take
that figure from here (:func:`host_memory`, :func:`with_host_memory`): every socket's bandwidth, a NUMA node a
socket.

Lookup (:func:`find_cpu`) matches names as the card catalogue does (zerogate.config.cards.name_words,
words_match: ``2x AMD EPYC 7742 64-Core Processor`` holds ``EPYC 7742``); a leading ``<N>x`` is the number of
sockets (:func:`sockets`), one where the text gives none.

What the peak assumes: every channel populated, at the rated speed (a board with fewer DIMMs, or two a channel
run slower, has less: the interval's high end is then too low).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from pydantic import ConfigDict, Field, model_validator

from zerogate.config.cards import check_catalogue, longest_named, nearest_named, read_checked
from zerogate.config.machines import MachineDescription
from zerogate.contracts.base import Record

HOST_CPUS_FILE = "config/host_cpus.yaml"
# DDR4 and DDR5 move 64 data bits a transfer per channel (DDR5's two 32-bit subchannels together): JEDEC
# JESD79-4 and JESD79-5, https://www.jedec.org/standards-documents/docs/jesd79-4a.
BYTES_PER_TRANSFER = 8
SOCKET_COUNT = re.compile(r"^\s*(\d+)\s*[xX×*]\s*")


class CpuRecord(Record):
    model_config = ConfigDict(strict=True)


class CpuMemory(CpuRecord):
    channels: int = Field(ge=1, description="memory channels per socket")
    transfers_mts: int = Field(ge=1, description="the fastest DIMM speed the vendor rates, MT/s")
    source: str = Field(description="a key of the catalogue's sources")

    def socket_gbps(self) -> float:
        """One socket's peak, 10^9 bytes per second: channels x MT/s x 8 bytes."""
        return self.channels * self.transfers_mts * BYTES_PER_TRANSFER / 1000


class HostCpu(CpuRecord):
    cpu: str = Field(description="the CPU's name as the plan prints it")
    names: list[str] = Field(min_length=1, description="names as lscpu or the vendor print them")
    memory: CpuMemory


class CpuCatalogue(CpuRecord):
    """config/host_cpus.yaml: the sources (key -> title and URL) and the CPUs."""

    sources: dict[str, str]
    cpus: list[HostCpu]

    @model_validator(mode="after")
    def _consistent(self) -> CpuCatalogue:
        check_catalogue(self.sources, [(cpu.cpu, cpu.names, [("memory", cpu.memory)]) for cpu in self.cpus])
        return self


@functools.cache
def cpu_catalogue(path: str | None = None) -> CpuCatalogue:
    """The catalogue (config/host_cpus.yaml, or ``path``), read and checked once."""
    return read_checked(CpuCatalogue, path, HOST_CPUS_FILE)


def find_cpu(text: str | None, cpus: CpuCatalogue | None = None) -> HostCpu | None:
    """The catalogue's CPU whose longest name matches ``text``; None when none does."""
    return longest_named(text, (cpus or cpu_catalogue()).cpus)


def sockets(text: str) -> int:
    """The sockets a host's text names (``2x AMD EPYC 7742``: 2); one where it gives no count."""
    found = SOCKET_COUNT.match(text)
    return int(found.group(1)) if found else 1


def source_text(cpu: HostCpu, cpus: CpuCatalogue | None = None) -> str:
    """The CPU's memory figure with its source as a reader opens it."""
    memory = cpu.memory
    return (
        f"{cpu.cpu}: {memory.channels} channels x {memory.transfers_mts} MT/s x {BYTES_PER_TRANSFER} B = "
        f"{memory.socket_gbps():g} GB/s a socket ({(cpus or cpu_catalogue()).sources[memory.source]})"
    )


def close_cpu_names(text: str, cpus: CpuCatalogue | None = None, count: int = 6) -> list[str]:
    """The catalogue's CPUs nearest ``text`` (zerogate.config.cards.nearest_named), for an error that lists
    them."""
    named = ((n, cpu.cpu, cpu.cpu) for cpu in (cpus or cpu_catalogue()).cpus for n in cpu.names)
    return nearest_named(text, named, count)


class HostMemory(NamedTuple):
    """A host's memory as the catalogue has it: every socket's bandwidth, GB/s, its sockets, and the
    catalogue's figure with its source."""

    gbps: float
    sockets: int
    source: str


def host_memory(text: str | None, cpus: CpuCatalogue | None = None) -> HostMemory | None:
    """The memory of the host ``text`` names (``2x AMD EPYC 7742``); None where it names no CPU the catalogue
    has."""
    cpu = find_cpu(text, cpus)
    if text is None or cpu is None:
        return None
    count = sockets(text)
    return HostMemory(cpu.memory.socket_gbps() * count, count, source_text(cpu, cpus))


def with_host_memory(
    machine: MachineDescription, memory: HostMemory | None, *, replace: bool = False
) -> MachineDescription:
    """``machine`` with ``memory``'s bandwidth and a NUMA node a socket, where it states no bandwidth (a
    stated figure wins), or in place of the one it states with ``replace`` (its CPUs then named with the
    catalogue's figure and source, ``host.cpu_model``)."""
    if memory is None or (machine.host.memory_bandwidth_gbps and not replace):
        return machine
    update: dict[str, object] = {"memory_bandwidth_gbps": memory.gbps, "numa_nodes": memory.sockets}
    if replace:
        update["cpu_model"] = f"{memory.sockets} x {memory.source}"
    return machine.model_copy(update={"host": machine.host.model_copy(update=update)})
