"""What the run is, as a whole: its statistics (zerogate.analysis.summary.run_statistics), its provenance
(``provenance.json``), the run registry (``registry.json``: what ``compare`` reads) and the variants'
table (``variants/comparison.json``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.data import SplitStats
from zerogate.contracts.intervals import Interval, TimingIntervals
from zerogate.contracts.machine import Accelerator, Cpu, Ram
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.records import GitState
from zerogate.contracts.run import Deviation
from zerogate.contracts.verdicts import GateOutcome, JudgedGate, Reproduction


class RunStatistics(Record):
    """The headline statistics of one run, each one of zerogate.analysis' definitions; None where the
    records do not hold it. What the report's run summary, the registry, ``compare`` and the variants'
    table show."""

    ranks: int
    optimizer_steps: int
    warmup_steps_excluded: int
    timed_steps: int
    step_time_median_s: float | None = Field(alias="step_time_median(s)")
    step_time_p90_s: float | None = Field(alias="step_time_p90(s)")
    slowest_rank: int | None
    micro_step_time_median_s: float | None = Field(alias="micro_step_time_median(s)")
    tokens_per_s: float | None
    first_loss: float | None
    final_loss: float | None
    loss_spikes: int
    overflow_skipped_steps: int | None
    peak_memory_per_rank_gib: dict[int, float] = Field(alias="peak_memory_per_rank(GiB)")
    run_complete: bool | None
    failed_ranks: int | None
    straggler_rank: int | None
    straggler_compute_excess_s: float | None = Field(alias="straggler_compute_excess(s)")
    wait_for_straggler_median_s: float | None = Field(alias="wait_for_straggler_median(s)")
    # The timing statistics' intervals (zerogate.analysis.intervals); None when not asked for or
    # the run has too few timed steps. With repeats, the timing values above are the repeats' pooled ones.
    intervals: TimingIntervals | None = None
    repeats: int = Field(1, alias="repeats(runs)")

    def interval_of(self, name: str) -> Interval | None:
        """The interval of timing statistic ``name`` (a field of this class), None for others."""
        return None if self.intervals is None else self.intervals.of(name)


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
    """One variant of the table: what trained it and its run statistics (summary.run_statistics, with the
    timing intervals), beside its predicted peak and its measured communication where those exist. A variant
    that cannot run on this machine has no statistics and says why (``not_run``)."""

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
