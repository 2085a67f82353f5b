"""The run's summary (``summary/run.json``, rule summarise_run; a variant's
``variants/<name>/summary/run.json``, rule summarise_variant): every statistic of the run computed once, with
the settings it was computed under.
The gates, the report, the figures, the registry, the variants' table and ``compare`` read it and compute
none of it again.

Each field names the one function of zerogate.analysis that computes it (zerogate.analysis.summary.summarise
calls them): a number on the report's first screen is the summary's field, then that function.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zerogate.config.judging import IntervalSettings
from zerogate.config.training import StabiliserSettings
from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.intervals import Interval, TimingIntervals


class SpikeRule(Record):
    """The loss stabiliser's spike rule, from the profile's ``stabiliser`` settings (defaults filled in by
    zerogate.config.settings, the one place they live; the rules pass them in)."""

    window: int
    threshold: float
    min_history: int

    @classmethod
    def from_settings(cls, stabiliser: StabiliserSettings) -> SpikeRule:
        """From the run's ``stabiliser`` settings (train/settings.json)."""
        return cls(
            window=int(stabiliser.spike_window),
            threshold=float(stabiliser.spike_threshold),
            min_history=int(stabiliser.spike_min_history),
        )

    def describe(self) -> str:
        return (
            f"upward only: robust z > {self.threshold:g} against the last {self.window} applied, non-spike "
            f"losses (judged from {self.min_history} of them on); a sudden drop is not a spike"
        )


class IntervalRule(Record):
    """The intervals' settings (profile key ``intervals``, zerogate.config.settings.IntervalSettings)."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0

    @classmethod
    def from_settings(cls, settings: IntervalSettings) -> IntervalRule:
        return cls(
            confidence=float(settings.confidence), resamples=int(settings.resamples), seed=int(settings.seed)
        )


class RunStatistics(Record):
    """The headline statistics of one run (zerogate.analysis.summary.run_statistics), each one of
    zerogate.analysis' definitions; None where the records do not hold it. What the report's run summary,
    the registry, ``compare`` and the variants' table show."""

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
    # The timing statistics' intervals (zerogate.analysis.intervals); None when not asked for or the run has
    # too few timed steps. With repeats, the timing values above are the repeats' pooled ones.
    intervals: TimingIntervals | None = None
    repeats: int = Field(1, alias="repeats(runs)")

    def interval_of(self, name: str) -> Interval | None:
        """The interval of timing statistic ``name`` (a field of this class), None for others."""
        return None if self.intervals is None else self.intervals.of(name)


class LossSpikes(Record):
    """The loss spikes of a run (zerogate.analysis.loss_trend.loss_spikes): how many, at which optimizer
    steps, under which rule (in words)."""

    count: int
    steps: list[int]
    rule: str


class RecordCounts(Record):
    """A run's step records counted (zerogate.analysis.health.record_completeness): the ranks of the world
    size present, and per rank the optimizer steps missing, recorded more than once or not expected."""

    world_size: int | None
    expected_steps: int | None
    ranks_present: list[int]
    missing_ranks: list[int]
    missing_steps: dict[int, list[int]]
    repeated_steps: dict[int, list[int]]
    unexpected_steps: dict[int, list[int]]
    extra_ranks: list[int]
    steps_per_rank: dict[int, int] = {}  # distinct optimizer steps each rank recorded


class RankBalance(Record):
    """Who waits for whom (zerogate.analysis.rank_balance.rank_balance): compute, communication and wait per
    rank, and the straggler if there is one. Every statistic is None (and ``problems`` says why) when the
    records cannot define it."""

    ranks: list[int]
    timed_steps: int
    compute: dict[int, float]  # median compute(s) per rank
    wait: dict[int, float]  # median wait(s) per rank
    wait_total: dict[int, float]  # wait(s) summed over the timed steps, per rank
    wait_share: dict[int, float]  # summed wait(s) / summed step_time(s), per rank
    step_time: dict[int, float]  # median step_time(s) per rank
    communication: float | None  # median communication(s) per step
    slowest: int | None  # the rank with the largest median compute, named or not
    straggler: int | None  # the slowest rank, when it exceeds the others by more than the margin
    excess: float | None  # slowest's median compute - the next slowest rank's (s)
    excess_ratio: float | None  # excess / the next slowest rank's median compute
    next_slowest: int | None
    pace: float | None  # median optimizer-step time, slowest rank (the margin's base)
    margin: float  # the straggler margin, a share of the pace
    problems: list[str] = []

    @property
    def measured(self) -> bool:
        return not self.problems

    @property
    def waiting_for_straggler(self) -> dict[int, float]:
        """Each other rank's median wait(s) per step; empty without a straggler."""
        return {} if self.straggler is None else {r: w for r, w in self.wait.items() if r != self.straggler}

    def summary(self) -> dict[str, Any]:
        """The run statistics' straggler fields (RunStatistics)."""
        waits = self.waiting_for_straggler
        return {
            "straggler_rank": self.straggler,
            "straggler_compute_excess_s": self.excess if self.straggler is not None else None,
            "wait_for_straggler_median_s": max(waits.values()) if waits else None,
        }

    def evidence(self) -> dict[str, Any]:
        return {
            "ranks(rank)": self.ranks,
            "timed_steps(steps)": self.timed_steps,
            "compute_median(s)": self.compute,
            "wait_median(s)": self.wait,
            "wait_total(s)": self.wait_total,
            "wait_share(ratio)": self.wait_share,
            "step_time_median(s)": self.step_time,
            "communication_median(s)": self.communication,
            "slowest_rank": self.slowest,
            "straggler_rank": self.straggler,
            "next_slowest_rank": self.next_slowest,
            "compute_excess(s)": self.excess,
            "compute_excess(ratio)": self.excess_ratio,
            "straggler_margin(ratio of step time)": self.margin,
            "problems": self.problems,
        }


class TimingDraws(Record):
    """The timing statistics pooled over the repeats with their bootstrap replicates
    (zerogate.analysis.bootstrap.timing_replicates, as zerogate.analysis.intervals.TimingReplicates holds
    them): what a time gate's interval and ``compare``'s ratio intervals are read from. Keys: the
    RunStatistics fields of zerogate.analysis.intervals.TIMING_STATISTICS, in its order."""

    values: dict[str, float]  # each statistic pooled over the repeats (NaN where a repeat has a gap)
    per_repeat: list[dict[str, float]]  # each repeat's own statistic, repeat 0 first
    block_lengths: list[float] = Field(alias="mean_block_lengths(steps)")  # one per repeat
    replicates: dict[str, list[float]]  # the pooled statistic's bootstrap replicates


class RunSummary(Artefact):
    """``summary/run.json``: the run's statistics, computed once under the analysis settings it records
    (the rule's params: editing them re-summarises and re-judges, never retrains)."""

    CONTRACT = "run_summary"
    VERSION = 1

    warmup_steps_excluded: int = Field(alias="warmup_steps_excluded(steps)")
    spike_rule: SpikeRule
    interval_rule: IntervalRule | None  # None: no intervals asked for
    # zerogate.analysis.summary.summarise_repeats: the repeats pooled (profile key ``repeats``; one run: its
    # own statistics); None when the run recorded no step.
    statistics: RunStatistics | None
    repeats: list[RunStatistics | None]  # each repeat's own statistics, repeat 0 (the run itself) first
    # Per rank, the largest repeat's peak less the smallest's (zerogate.analysis.summary.peak_memory_spread).
    peak_memory_spread_gib: dict[int, float | None] = Field(alias="peak_memory_spread(GiB)")
    records: list[RecordCounts]  # each repeat's step records counted against the run spec, repeat 0 first
    loss_spikes: LossSpikes  # the run's (repeat 0's)
    rank_balance: RankBalance  # the run's (repeat 0's), over the finished run's world size
    # DeepSpeed's own wall-clock breakdown (rank 0), median per timer, when the run logged it
    # (zerogate.analysis.summary.deepspeed_timer_medians).
    deepspeed_timers: dict[str, float] = {}
    timing: TimingDraws | None  # None without intervals, or with a repeat too short for one
