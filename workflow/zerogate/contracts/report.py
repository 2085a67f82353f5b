"""What the run is, as a whole: its provenance (``provenance.json``), the run registry (``registry.json``:
what ``compare`` reads) and the variants' table (``variants/comparison.json``). The run's statistics are
zerogate.contracts.summary's."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.data import SplitStats
from zerogate.contracts.machine import Accelerator, Cpu, Ram
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.records import GitState
from zerogate.contracts.run import Deviation
from zerogate.contracts.summary import RunStatistics
from zerogate.contracts.verdicts import GateOutcome, JudgedGate, Reproduction


class MachineFacts(Record):
    hostname: str
    platform: str
    cpu: Cpu
    ram: Ram
    accelerator: Accelerator


class GitAtStages(Record):
    at_training: GitState | None
    at_report: GitState


class DatasetFacts(Record):
    source: str
    content_sha256: str
    splits: dict[str, SplitStats]


class Provenance(Artefact):
    """Where a result came from: pipeline version, run id, git commit, the resolved profile and its hash,
    the DeepSpeed config, packages, machine and dataset."""

    CONTRACT = "provenance"
    VERSION = 2

    pipeline_version: str
    run_id: str
    recorded_at: str
    git: GitAtStages
    profile: str
    config_hash: str
    measurement_hash: (
        str  # the profile without repeats, interval settings and fault injection (compare's key)
    )
    resolved_profile: dict[str, Any]
    ds_config: dict[str, Any]
    packages: dict[str, Any]
    machine: MachineFacts
    dataset: DatasetFacts


class RegistryProvenance(Record):
    config_hash: str
    measurement_hash: str
    fault_injection: dict[str, Any] | None = None  # the profile's stabiliser.inject, when the run had one
    dataset_sha256: str
    ds_config_sha256: str
    git: GitAtStages
    packages: dict[str, Any]
    machine: MachineFacts
    recorded_at: str


class RegistryFiles(Record):
    report: str
    verdicts: str
    steps: str
    events: str
    provenance: str
    figures: dict[str, str]
    repeat_steps: list[str] = []  # the other repeats' steps tables, repeat 1 first


class RunRegistry(Artefact):
    """``registry.json``: one run in one file, for ``compare`` and for diffing runs; every path relative
    to the repository that made it."""

    CONTRACT = "run_registry"
    VERSION = 4

    pipeline_version: str
    run_id: str
    profile: str
    machine: str
    registered_at: str
    verdict_counts: dict[GateOutcome, int]
    reproduction: Reproduction
    gates: list[JudgedGate]
    summary: RunStatistics | None  # None when the run recorded no step; the repeats pooled
    repeats: list[RunStatistics] = []  # each repeat's own statistics (profile key repeats; empty for one run)
    run: RunMeta
    provenance: RegistryProvenance
    deviations: list[Deviation]
    files: RegistryFiles


class VariantRow(Record):
    """One variant of the table: what trained it and its run statistics (its run summary's,
    zerogate.analysis.summary.run_statistics, with the timing intervals), beside its predicted peak and its
    measured communication where those exist. A variant that cannot run on this machine has no statistics
    and says why (``not_run``)."""

    variant: str
    engine: str  # what trained it: zerogate.runtime.engines' name, or the peer's (zerogate.render.variants)
    what: str
    stage: int  # the ZeRO stage of the config it trained from (a peer: the ZeRO variant it stands beside)
    offload_optimizer: bool
    offload_param: bool
    statistics: RunStatistics | None
    wall_time_s: float | None = Field(alias="wall_time(s)")
    # The planner's peak per rank for the variant's config (every rank the same), of the step-record key
    # ``predicted_peak_metric`` (the one the measured peak is): None where the planner has no model of it.
    predicted_peak_gib: float | None = Field(None, alias="predicted_peak(GiB)")
    predicted_peak_metric: str | None = None
    # Bytes one rank communicates per optimizer step (worst rank), DeepSpeed's comms logger in
    # measure_comms_volume's short runs of the same scheme: None where that scheme is not measured.
    communicated_bytes_per_step: float | None = Field(None, alias="communicated_per_step(bytes)")
    note: str | None = None  # what the row's figures mean on this machine (e.g. an offload with no transfer)
    not_run: str | None = None  # why the variant did not train here


class LossAgreement(Record):
    """A peer's loss curve against ZeRO's at the same seed, data and precision: the largest relative
    difference per optimizer step, against the tolerance the ZeRO stages' own differences set (the same
    algorithm in another float reduction order), and the first step's (before any update: the initial
    weights and the forward alone)."""

    peer: str
    reference: str
    steps: int
    max_relative_difference: float
    first_step_relative_difference: float
    tolerance: float | None  # None with fewer than two of ZeRO-0, -1, -2 trained to derive it from
    tolerance_from: list[str]  # the ZeRO variants whose pairwise differences gave the tolerance
    tolerance_rule: str
    within: bool | None
    diagnosis: str  # where the curves part, when they do (zerogate.analysis.variants.diagnosis)


class VariantsTable(Artefact):
    """``variants/comparison.json``: the same model and data under every listed ZeRO stage and offload, and
    ZeRO's peers; which is fastest and which smallest, and each peer's loss curve against ZeRO-3's."""

    CONTRACT = "variants_table"
    VERSION = 2

    rows: list[VariantRow]
    fastest: str | None = None  # lowest median step time (the slowest rank's)
    smallest: str | None = None  # lowest peak memory of its largest rank
    agreement: list[LossAgreement] = []
