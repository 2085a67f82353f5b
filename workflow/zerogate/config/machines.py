"""Machine descriptions: hand-written (config/machines/*.yaml) or derived from the probe's fingerprint, both
a :class:`MachineDescription`, so the planner reads one typed format. config/schemas/machine.schema.json is
generated from the model (zerogate.config.schemas) and accepts exactly what the model accepts; a description
that breaks it is refused with one line naming the file and the dotted key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from zerogate.config.tables import read_yaml
from zerogate.config.validation import dotted
from zerogate.contracts.base import Record
from zerogate.contracts.machine import Fingerprint
from zerogate.errors import InputError

T = TypeVar("T")


def _present(value: Any) -> Any:
    """A key that may be left out may not be written null."""
    if value is None:
        raise PydanticCustomError("not_null", "None is not allowed here (leave the key out instead)")
    return value


def _without_null(schema: dict[str, Any]) -> None:
    """The JSON schema of an omittable key: its type without the null that its Python type (None when the
    key is left out) adds."""
    branches = [branch for branch in schema.pop("anyOf", []) if branch.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = branches


def _whole(value: Any) -> Any:
    """JSON schema's integers include floats without a fraction (12.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A key that may be left out (then None) but not written null.
Omittable = Annotated[T | None, BeforeValidator(_present), Field(json_schema_extra=_without_null)]
# Numbers as JSON schema has them (an integer includes 2.0), with their bounds.
Integer = Annotated[int, BeforeValidator(_whole)]
AtLeastOne = Annotated[int, Field(ge=1), BeforeValidator(_whole)]
NotNegative = Annotated[int, Field(ge=0), BeforeValidator(_whole)]
Positive = Annotated[float, Field(gt=0)]
NotNegativeFloat = Annotated[float, Field(ge=0)]


def _no_defaults(schema: dict[str, Any]) -> None:
    """A description's JSON schema fills nothing in: a key left out is unknown (None), not a default."""
    for field in schema.get("properties", {}).values():
        field.pop("default", None)


class Description(Record):
    """A part of a machine description: closed, and typed strictly (a string is not a number, 1 not true)."""

    model_config = ConfigDict(strict=True, json_schema_extra=_no_defaults)


class PcieLink(Description):
    generation: AtLeastOne | None = None
    width: AtLeastOne | None = None
    max_generation: AtLeastOne | None = None
    max_width: AtLeastOne | None = None


class StatedPeak(Description):
    """a card's dense peak for one dtype, stated in the description (it wins over the card catalogue)"""

    tflops: Positive = Field(description="dense (no 2:4 sparsity) 10^12 FLOP/s")
    source: str = Field(description="where the figure comes from (a datasheet's URL, a measurement)")


class GpuDescription(Description):
    name: str = Field(description="the card's name as CUDA/ROCm report it (looked up in config/cards.yaml)")
    memory_total_bytes: AtLeastOne
    memory_free_bytes: NotNegative | None = None
    compute_capability: str | None = None
    fp16_supported: Omittable[bool] = None
    bf16_supported: Omittable[bool] = None
    memory_bandwidth_gbps: Positive | None = None
    pcie: Omittable[PcieLink] = None
    peaks: Omittable[dict[Literal["fp16", "bf16", "fp32"], StatedPeak]] = Field(
        None,
        description="dense peaks per dtype, each with its source; absent: the card catalogue's "
        "(config/cards.yaml)",
    )


class FigureDescription(Description):
    """one figure with its basis and where it comes from"""

    value: float = Field(ge=0, description="0 only for a latency the measured calls do not show above 0")
    basis: Literal["measured", "published", "derived"]
    source: str
    high: Omittable[NotNegativeFloat] = Field(
        None, description="where the figure is an interval (low, high): its high end, value its low"
    )
    low: Omittable[NotNegativeFloat] = Field(
        None,
        description="a rate measured from its slowest repeat to its best: the slow end, value the best "
        "(the probe's bandwidth)",
    )

    @model_validator(mode="after")
    def _ordered(self) -> FigureDescription:
        if self.high is not None and self.high < self.value:
            raise ValueError(f"high {self.high} is below value {self.value}")
        if self.low is not None and self.low > self.value:
            raise ValueError(f"low {self.low} is above value {self.value}")
        return self


class SampleDescription(Description):
    tensor_bytes: float = Field(ge=0)
    seconds: float = Field(ge=0)
    slowest_seconds: Omittable[NotNegativeFloat] = Field(
        None, description="the slowest batch's seconds per call (seconds: the best batch's)"
    )


class CollectiveKindDescription(Description):
    latency_s: Omittable[FigureDescription] = None
    bandwidth_gbps: Omittable[FigureDescription] = None
    samples: Omittable[list[SampleDescription]] = Field(
        None, description="the probe's raw timings, seconds per call at each full-tensor size"
    )


# What a description's collectives section is (the floor's communication figures).
COLLECTIVES = (
    "Collectives between the ranks, the planner floor's communication terms (zerogate.predict.collectives): "
    "measured by the probe (gloo between two local ranks on the CPU accelerator, NCCL between two GPUs), or "
    "written in a description (published figures, each with its source). Per collective kind (the names of "
    "zerogate.predict.comms: all_reduce, all_gather, reduce_scatter, broadcast, reduce) the latency in "
    "seconds per call and the bandwidth in 10^9 bytes per second of a rank's volume. A figure that is absent "
    "is unknown: on GPUs without NVLink the floor derives a bandwidth from the PCIe links (marked derived); "
    "otherwise it lists the term as missing."
)


class CollectivesDescription(Description):
    """Collectives between the ranks (COLLECTIVES)."""

    backend: str = Field(description="the collective library: gloo, nccl")
    world: Omittable[AtLeastOne] = Field(None, description="ranks the figures were measured or published for")
    route: str | None = Field(
        None,
        description="how the bytes travel (loopback on one host; through host memory; peer-to-peer; NVLink)",
    )
    how: Omittable[str] = Field(None, description="how the figures were measured")
    seconds: Omittable[NotNegativeFloat] = Field(None, description="time the probe's measurement took")
    error: Omittable[str] = Field(
        None, description="why the probe's measurement failed (its figures are then absent)"
    )
    skipped: Omittable[str] = Field(None, description="why nothing was measured")
    kinds: dict[str, CollectiveKindDescription]


# What a description's network section is (the collectives' figures between nodes).
NETWORK = (
    "The network between the nodes, for a description of more than one node: what it is (e.g. '8 x 200 "
    "Gb/s HDR InfiniBand') and the bandwidth of one node's network adapters together, one direction, in "
    "10^9 bytes per second (a 200 Gb/s adapter is 25). An interval where the adapters' count is not known: "
    "``low`` one adapter, ``value`` the most the node can have. A ring collective across nodes runs at the "
    "slower of this and the GPUs' own link (zerogate.predict.floor.collective_figures); without it, the "
    "collectives' terms across nodes have no figure."
)


class NetworkDescription(Description):
    """The network between the nodes (NETWORK)."""

    kind: str = Field(description="what the network is, as its source says it")
    bandwidth_gbps: FigureDescription = Field(
        description="one node's adapters together, one direction, 10^9 bytes per second"
    )

    @model_validator(mode="after")
    def _moves_bytes(self) -> NetworkDescription:
        figure = self.bandwidth_gbps
        if figure.value <= 0 or (figure.low is not None and figure.low <= 0):
            raise ValueError("a network's bandwidth must be above 0")
        return self


class HostDescription(Description):
    cpu_model: str | None = None
    physical_cores: AtLeastOne | None = None
    logical_cores: AtLeastOne | None = None
    numa_nodes: AtLeastOne | None = None
    ram_total_bytes: AtLeastOne | None = Field(
        description="the host's RAM; null = unknown (the plan then does not check the host, and says so)"
    )
    ram_available_bytes: NotNegative | None = None
    shm_bytes: NotNegative | None = None
    pinned_memory_limit_bytes: Integer | None = Field(None, description="RLIMIT_MEMLOCK; null = unlimited")
    memory_bandwidth_gbps: Positive | None = None
    cpu_peak_tflops_fp32: Positive | None = None
    nvme_bytes: NotNegative | None = Field(
        None,
        description="capacity of the NVMe space DeepSpeed may swap to (offload device nvme, its nvme_path), "
        "per node; null or absent = unknown: an NVMe-offloaded run is then planned without that check, and "
        "says so",
    )


class MachineDescription(Description):
    """A machine as zerogate plans for it: written by hand in config/machines/<name>.yaml for a machine you
    do not have, or derived from probe/hardware.json for the one you run on
    (zerogate.config.machines.from_fingerprint). Bytes are bytes; bandwidths are 10^9 bytes per second;
    peaks are 10^12 FLOP per second, dense. Unknown figures are null: the planner then leaves the terms that
    need them out and says so."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    source: Literal["described", "probed"]
    description: Omittable[str] = None
    nodes: AtLeastOne
    gpus: list[GpuDescription] = Field(
        description="one entry per device (a rank each); empty on a machine without GPUs"
    )
    peer_to_peer: bool | None = Field(
        None, description="true only if every pair of devices can access each other's memory directly"
    )
    nvlink: bool | None = None
    collectives: CollectivesDescription | None = Field(None, description=COLLECTIVES)
    network: Omittable[NetworkDescription] = Field(None, description=NETWORK)
    host: HostDescription
    _file: str | None = PrivateAttr(None)

    @property
    def file(self) -> str | None:
        """The file the description was read from (None: built in memory, e.g. from a box's short form)."""
        return self._file

    def plain(self) -> dict[str, Any]:
        """The description as its YAML file would hold it (keys left out where they were absent; the host's
        RAM, a key that must be there, null where unknown)."""
        plain = self.model_dump(mode="json", exclude_none=True)
        plain["host"].setdefault("ram_total_bytes", None)
        return plain


def _problem(error: dict[str, Any]) -> tuple[str, str]:
    """(dotted key, problem) of one of pydantic's errors, worded as the schema's validator words it."""
    location = [part for part in error["loc"]]
    if error["type"] == "extra_forbidden":
        return dotted(location), "unknown key (not in the schema; misspelt?)"
    if error["type"] == "missing":
        return dotted(location[:-1]), f"'{location[-1]}' is a required property"
    given = error.get("input")
    if isinstance(given, str) and str(location[-1]).endswith("_bytes"):  # "24GB" for 25769803776
        return dotted(location), f"{given!r} is not a whole number of bytes (24 GiB is {24 * 2**30})"
    shown = "" if isinstance(given, (dict, list)) else f", got {given!r}"
    return dotted(location), f"{error['msg']}{shown}"


def check(raw: Any, file: str) -> MachineDescription:
    """``raw`` (a parsed description, or a description to check again) as a MachineDescription; else
    InputError naming ``file`` and the key."""
    if isinstance(raw, MachineDescription):
        raw = raw.plain()
    try:
        return MachineDescription.model_validate(raw)
    except ValidationError as error:
        problems = sorted(error.errors(include_url=False), key=lambda e: [str(part) for part in e["loc"]])
        key, problem = _problem(problems[0])
        raise InputError(file, key, problem) from None


def load_description(path: str | Path) -> MachineDescription:
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "", "no such machine description")
    raw = read_yaml(path, str(path))
    if not isinstance(raw, dict):
        raise InputError(str(path), "", "a machine description must be a mapping")
    machine = check(raw, str(path))
    machine._file = str(path)
    return machine


def described_machine(
    path: str, asked_by: str, repo: str | Path, key: str = "machine_description"
) -> MachineDescription:
    """The description a file names (``path``, relative to the repository ``repo`` or absolute: ``--config
    machine_description``'s, say), checked whole when the workflow loads, so a bad one stops even a dry run
    before any job: InputError naming ``asked_by`` and ``key`` (where the path was given) for a missing
    file, else the description's file and the dotted key of the first bad value."""
    file = Path(repo) / path
    if not file.is_file():
        raise InputError(asked_by, key, f"no such file: {path}")
    return load_description(file)


def _gpu_of(device: Any) -> dict[str, Any]:
    """One probed device as a description's GPU (figures the probe does not know left out)."""
    gpu: dict[str, Any] = {
        "name": device.name,
        "memory_total_bytes": device.memory_total_bytes,
        "fp16_supported": device.fp16_supported,
        "bf16_supported": device.bf16_supported,
    }
    if device.compute_capability is not None:
        gpu["compute_capability"] = device.compute_capability
    if device.memory_free_bytes is not None:
        gpu["memory_free_bytes"] = device.memory_free_bytes
    if device.pcie is not None:
        gpu["pcie"] = device.pcie.model_dump()
    return gpu


def from_fingerprint(fingerprint: Fingerprint, name: str) -> MachineDescription:
    """The probed machine as a description (figures the probe cannot know stay null)."""
    cpu, ram, host = fingerprint.cpu, fingerprint.ram, fingerprint.host
    collectives = fingerprint.collectives
    described = {
        "name": name,
        "source": "probed",
        "nodes": 1,
        "gpus": [_gpu_of(device) for device in fingerprint.accelerator.devices],
        "peer_to_peer": fingerprint.links.peer_to_peer_all_pairs,
        "nvlink": fingerprint.links.nvlink_any,
        # The probe's collective latency and bandwidth (zerogate.predict.collectives), for the floor; what the
        # probe does not know is left out (the schema has no nulls there).
        **(
            {"collectives": collectives.model_dump(mode="json", by_alias=True, exclude_none=True)}
            if collectives is not None
            else {}
        ),
        "host": {
            "cpu_model": cpu.model,
            "physical_cores": cpu.physical_cores,
            "logical_cores": cpu.logical_cores,
            "numa_nodes": host.numa_nodes,
            "ram_total_bytes": ram.total_bytes,
            "ram_available_bytes": ram.available_bytes,
            "shm_bytes": host.shm_bytes,
            "pinned_memory_limit_bytes": host.pinned_memory_limit_bytes,
            "memory_bandwidth_gbps": host.memory_bandwidth_gbps,
            "cpu_peak_tflops_fp32": host.cpu_peak_tflops_fp32,
        },
    }
    return check(described, f"the probe's fingerprint ({name})")


def _device_of(index: int, gpu: GpuDescription) -> dict[str, Any]:
    """A described GPU as the fingerprint's device (what the planner alone reads stays behind)."""
    return {
        "index": index,
        "name": gpu.name,
        "memory_total_bytes": gpu.memory_total_bytes,
        "memory_free_bytes": gpu.memory_free_bytes,
        "compute_capability": gpu.compute_capability,
        "fp16_supported": True if gpu.fp16_supported is None else gpu.fp16_supported,
        "bf16_supported": False if gpu.bf16_supported is None else gpu.bf16_supported,
        **({} if gpu.pcie is None else {"pcie": gpu.pcie.model_dump()}),
        "memory_bandwidth_gbps": gpu.memory_bandwidth_gbps,
    }


def to_fingerprint(machine: MachineDescription) -> Fingerprint:
    """A described machine in the probe's fingerprint shape, so the config renders for it as for a probed
    one."""
    host, gpus = machine.host, machine.gpus
    return Fingerprint.of(
        {
            "hostname": machine.name,
            "platform": "described",
            "cpu": {
                "model": host.cpu_model,
                "logical_cores": host.logical_cores,
                "physical_cores": host.physical_cores,
                "affinity_cores": host.logical_cores,
            },
            "ram": {"total_bytes": host.ram_total_bytes, "available_bytes": host.ram_available_bytes},
            "accelerator": {
                "kind": "cuda" if gpus else "cpu",
                "count": len(gpus),
                "devices": [_device_of(i, g) for i, g in enumerate(gpus)],
                **({} if gpus else {"cpu": {"fp16_supported": False}}),
            },
        },
        machine.name,
    )


def target_machine(
    description: str | None, fingerprint: str | None, name: str
) -> tuple[MachineDescription, Fingerprint]:
    """(machine, fingerprint) of the machine a run is rendered and planned for: a described one
    (config/machines/<name>.yaml, given as its path) or the probed one (the probe's file, named ``name``)."""
    if description is not None:
        machine = load_description(description)
        return machine, to_fingerprint(machine)
    assert fingerprint is not None
    probed = Fingerprint.read(fingerprint)
    return from_fingerprint(probed, name), probed
