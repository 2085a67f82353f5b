"""What the run is, as a whole: its statistics (zerogate.analysis.measures.run_statistics), its provenance
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
    """The headline statistics of one run, each one of measures' definitions; None where the records do
    not hold it. What the report's run summary, the registry, ``compare`` and the variants' table show."""

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
    # The timing statistics' intervals (zerogate.analysis.measures, "Intervals"); None when not asked for or
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
    measurement_hash: str  # the profile without repeats, interval settings and fault injection (compare's key)
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
    variant: str
    stage: int
    offload_optimizer: bool
    offload_param: bool
    statistics: RunStatistics
    wall_time_s: float | None = Field(alias="wall_time(s)")


class VariantsTable(Artefact):
    """``variants/comparison.json``: the same model and data under every listed ZeRO stage and offload."""

    CONTRACT = "variants_table"

    rows: list[VariantRow]
