"""Communication volume: each rank's records of one scheme and accumulation
(``comms/records/<scheme>/g<accumulation>/rank<r>.json``, zerogate.train.comms_volume) and the table of
measured against theoretical volume (``comms/volume.json``, zerogate.analysis.comms)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.model import ModelCounts


class LoggedCalls(Record):
    """One record name and message size of DeepSpeed's comms logger (or the DDP hook): how many calls."""

    name: str
    msg_bytes: int
    calls: int


class TheorySettings(Record):
    """The rendered config's settings the theory (zerogate.predict.comms.theory) takes, as DeepSpeed resolves
    them."""

    persistence_threshold: int
    reduce_bucket_elements: int
    prefetch_bucket_elements: int
    max_reuse_distance: int
    leaf_blocks: bool
    multi_rank_bucket_allreduce: bool
    gradient_clipping: float


class HostDeviceCopies(Record):
    counted: bool
    reason: str


class CommsMeasurement(Record):
    """One scheme at one accumulation, as the measuring worker runs it: the DeepSpeed config (the
    rendered one with the comms logger on and the scheme's stage and offloads) and what the theory needs."""

    scheme: str
    engine: Literal["deepspeed", "ddp", "fsdp2"]  # what trains it (zerogate.runtime.engines)
    accumulation: int
    ds_config: dict[str, Any]
    dtype: str
    dtype_bytes: int
    theory_settings: TheorySettings


class CommsPlan(Artefact):
    """``comms/measurements.json``: every scheme and accumulation the worker measures, in order, and the
    model's counts (rendered by the planning side, zerogate.predict.comms_plan.measurements)."""

    CONTRACT = "comms_plan"

    measurements: list[CommsMeasurement]
    counts: ModelCounts


class CommsRecord(Artefact):
    """One rank's measured collectives of one scheme and accumulation."""

    CONTRACT = "comms_record"

    scheme: str
    accumulation: int
    rank: int
    world_size: int
    status: Literal["run", "not_run"]
    reason: str | None
    warmup_steps: int
    measured_steps: int
    seconds: float
    rss_after_gib: float = Field(alias="rss_after(GiB)")  # what the scheme left behind
    recorder: str
    phases: dict[str, list[LoggedCalls] | None]  # init, warmup, measured
    counts: ModelCounts
    buffer_bytes: int  # the model's buffers (what DDP broadcasts before a synchronised forward)
    dtype: str
    dtype_bytes: int
    theory_settings: TheorySettings
    accelerator: str
    host_device_copies: HostDeviceCopies
    ds_config: dict[str, Any]


class KindVolume(Record):
    calls: float
    tensor_bytes: float
    volume_bytes: float | None  # None: a record name with no volume definition (never counted as zero)
    known: bool = True
    record_names: list[str] = []


class RankVolume(Record):
    kinds: dict[str, KindVolume]
    calls: float
    volume_bytes: float
    unknown_kinds: list[str]
    complete: bool


class TheoryRow(Record):
    name: str
    kind: str
    per: str
    departure: bool
    why: str
    calls: float
    tensor_bytes: float
    volume_bytes: float


class TheoryVolume(Record):
    terms: list[TheoryRow]
    kinds: dict[str, KindVolume]
    calls: float
    volume_bytes: float
    base_volume_bytes: float
    departures_volume_bytes: float


class VolumeRow(Record):
    """One scheme at one accumulation: measured per optimizer step (worst rank) against the theory."""

    scheme: str
    accumulation: int
    status: Literal["run", "not_run"]
    reason: str | None
    missing_ranks: list[int] = []
    ranks: dict[int, RankVolume] = {}
    measured_steps: int | None = None
    warmup_steps: int | None = None
    recorder: str | None = None
    host_device_copies: HostDeviceCopies | None = None
    seconds: float | None = None
    measured_volume_bytes: float | None = None
    measured_calls: float | None = None
    complete: bool | None = None
    theory: TheoryVolume | None = None
    ratio: float | None = None
    base_ratio: float | None = None
    within_tolerance: bool | None = None
    explained_by_terms: bool | None = None


class CommsVolume(Artefact):
    CONTRACT = "comms_volume"

    definition: str
    volume_factors: dict[str, float]
    ring_factor: float
    world_size: int
    parameters: int
    dtype_bytes: int
    accumulations: list[int]
    tolerance: float
    rows: list[VolumeRow]
    unexpected_schemes: list[str]
    note: str

    def row(self, scheme: str, accumulation: int) -> VolumeRow | None:
        return next((r for r in self.rows if r.scheme == scheme and r.accumulation == accumulation), None)
