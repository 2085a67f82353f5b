"""The machine a run is planned for and runs on: the probe's fingerprint (``probe/hardware.json``, also
what a described machine becomes for the renderer) and the pre-flight verdict
(``preflight/preflight.json``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from zerogate.contracts.base import Artefact, Record

Basis = Literal["measured", "published", "derived"]


class Figure(Record):
    """A number with where it comes from: ``measured`` here, ``published`` by a vendor or paper, or
    ``derived`` from other figures (zerogate.predict.collectives)."""

    value: float
    basis: Basis
    source: str
    high: float | None = None  # an interval's high end, ``value`` its low (a latency spread over its sources)
    # A rate's slow end, ``value`` its fast end: a bandwidth measured from its best repeat (value) to its
    # slowest (zerogate.predict.collectives.figures).
    low: float | None = None


class CollectiveSample(Record):
    tensor_bytes: int
    seconds: float  # the best batch's seconds per call
    slowest_seconds: float | None = None  # the slowest batch's (probes before it was recorded: None)


class CollectiveKindFigures(Record):
    """One collective kind between two ranks: latency per call and bandwidth (GB/s = 1e9 bytes/s)."""

    latency_s: Figure | None = None
    bandwidth_gbps: Figure | None = None
    samples: list[CollectiveSample] = []


class Collectives(Record):
    """Collectives between two ranks as the run places them (the floor's communication figures)."""

    backend: str | None = None
    world: int | None = None
    how: str | None = None
    route: str | None = None
    kinds: dict[str, CollectiveKindFigures] = {}
    seconds: float | None = None
    skipped: str | None = None  # why nothing was measured (one GPU: no pair)
    error: str | None = None  # why the measurement failed (the floor then lists the terms as missing)


class Pcie(Record):
    generation: int | None = None
    width: int | None = None
    max_generation: int | None = None
    max_width: int | None = None


class Device(Record):
    """One CUDA device as torch (and NVML, where present) sees it."""

    index: int
    name: str
    memory_total_bytes: int
    memory_free_bytes: int | None = None
    compute_capability: str | None = None
    fp16_supported: bool = True
    bf16_supported: bool = False
    pcie: Pcie | None = None
    nvlink_active_links: int = 0
    memory_bandwidth_gbps: float | None = None  # a described machine's published figure


class CpuAccelerator(Record):
    """What DeepSpeed's CPU accelerator offers on this CPU."""

    fp16_supported: bool = False
    avx512_bf16_flag: bool | None = None
    amx_bf16_flag: bool | None = None


class Accelerator(Record):
    kind: Literal["cpu", "cuda"]
    count: int
    devices: list[Device] = []
    cpu: CpuAccelerator | None = None


class Cpu(Record):
    model: str | None = None
    logical_cores: int | None = None
    physical_cores: int | None = None
    affinity_cores: int | None = None


class Ram(Record):
    total_bytes: int | None  # None only for a described machine that does not state its RAM
    available_bytes: int | None = None


class Host(Record):
    numa_nodes: int | None = None
    shm_bytes: int | None = None
    pinned_memory_limit_bytes: int | None = None
    memory_bandwidth_gbps: float | None = None  # measured copy bandwidth, read + write
    cpu_peak_tflops_fp32: float | None = None  # measured fp32 matmul, all cores


class LinkPair(Record):
    a: int
    b: int
    peer_to_peer: bool


class Links(Record):
    pairs: list[LinkPair] = []
    peer_to_peer_all_pairs: bool | None = None
    nvlink_any: bool | None = None


class Driver(Record):
    version: str | None = None
    cuda: str | None = None


class Fingerprint(Artefact):
    """The machine's hardware and software (zerogate.runtime.probe.probe), or a described machine in the
    same shape (zerogate.config.machines.to_fingerprint, ``platform: described``)."""

    CONTRACT = "fingerprint"

    hostname: str
    platform: str
    cpu: Cpu
    ram: Ram
    host: Host = Host()
    accelerator: Accelerator
    links: Links = Links()
    collectives: Collectives | None = None
    driver: Driver | None = None
    # Package versions ({name: version}), CUDA and NCCL, and DeepSpeed's op report ({"compatible",
    # "incompatible_reasons"}).
    versions: dict[str, Any] = {}

    @property
    def on_cpu(self) -> bool:
        return self.accelerator.kind == "cpu"

    @property
    def cores(self) -> int:
        return self.cpu.affinity_cores or self.cpu.logical_cores or 1


class NodeFingerprint(Artefact):
    """``train/metrics/node<i>.json``: the fingerprint of node ``node`` of a run over several nodes,
    written by its first rank without the probe's measurements."""

    CONTRACT = "node_fingerprint"

    node: int
    machine: Fingerprint


class Preflight(Artefact):
    """The profile's stated needs (its ``preflight`` section) against the probe: ok, or what is short."""

    CONTRACT = "preflight"

    ok: bool
    needs: dict[str, Any] = Field(default_factory=dict)
    shortfalls: list[str] = []
