"""Intervals on the timing statistics: a stationary block bootstrap over each run's timed steps, the
repeats pooled, and the interval of a ratio between two runs.

Each timing statistic (``TIMING_STATISTICS``) is resampled as zerogate.analysis.measures defines it (the
same ARRAY_STATISTICS over the resampled steps), so an interval brackets the very value the run statistics
show. The repeats of a run (profile key ``repeats``) are independent runs: their statistics are pooled by
``pooling_rule`` and resampled as such (``timing_replicates``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zerogate.analysis.columns import MICRO_STEP_TIME, STEP_TIME, TOKENS_PER_S
from zerogate.contracts.intervals import Interval, TimingIntervals
from zerogate.contracts.summary import IntervalRule, RunSummary, TimingDraws

# The timing statistics that carry an interval (RunStatistics field -> metric, statistic, how the ranks
# combine): the slowest rank's statistic of its own series, or the per-step sum over ranks.
TIMING_STATISTICS: dict[str, tuple[str, str, str]] = {
    "step_time_median_s": (STEP_TIME, "median", "slowest rank"),
    "step_time_p90_s": (STEP_TIME, "p90", "slowest rank"),
    "micro_step_time_median_s": (MICRO_STEP_TIME, "median", "slowest rank"),
    "tokens_per_s": (TOKENS_PER_S, "median", "sum over ranks"),
}


BOOTSTRAP_METHOD = (
    "stationary block bootstrap (Politis & Romano 1994; arch.bootstrap.StationaryBootstrap) over "
    "the timed steps, every rank's value of a step kept together, mean block length by Politis & "
    "White's estimate (arch.bootstrap.optimal_block_length) on each rank's step-time series, the "
    "largest; percentile interval"
)


COVERS_ONE_RUN = (
    "the step-to-step variation within this run (correlated steps included); not what differs from "
    "one run to the next (seed, process placement, the machine's load then): repeats cover that"
)


COVERS_REPEATS = (
    "the step-to-step variation within each repeat and the run-to-run variation between the repeats "
    "(the repeats resampled as independent runs)"
)


def pooling_rule(repeats: int) -> str:
    """How the repeats' statistics become one, in words (``pool`` does it)."""
    if repeats == 1:
        return "one run: its own statistic"
    if repeats == 2:
        return "the mean of the two repeats' statistics (nothing dropped: too few to tell an outlier)"
    return (
        f"the mean of the {repeats} repeats' statistics without the lowest and the highest (as MLPerf "
        "Training "
        "drops its fastest and slowest run): one disturbed run (another job starting, a cold cache) moves "
        "the mean of the rest less"
    )


def pool(values: np.ndarray) -> np.ndarray:
    """The repeats' statistics (last axis: one per repeat) pooled by ``pooling_rule``."""
    values = np.sort(np.asarray(values, dtype=float), axis=-1)
    if values.shape[-1] >= 3:
        values = values[..., 1:-1]
    return values.mean(axis=-1)


@dataclass(frozen=True)
class TimingReplicates:
    """The pooled timing statistics of one or more repeats and their bootstrap replicates: what the
    intervals are read from, and what ``compare`` divides to bracket a ratio between two runs."""

    values: np.ndarray  # one per TIMING_STATISTICS entry, pooled over the repeats
    replicates: np.ndarray  # resamples x statistics
    per_repeat: np.ndarray  # repeats x statistics, each repeat's own statistic
    block_lengths: list[float]
    rule: IntervalRule

    def interval(self, name: str, replicates: np.ndarray | None = None) -> Interval | None:
        """The percentile interval of statistic ``name`` (or of ``replicates``, one column per statistic)."""
        column = list(TIMING_STATISTICS).index(name)
        drawn = (self.replicates if replicates is None else replicates)[:, column]
        if not np.isfinite(self.values[column]) or not np.isfinite(drawn).all():
            return None
        tail = (1 - self.rule.confidence) / 2
        low, high = np.quantile(drawn, [tail, 1 - tail])
        return Interval(low=float(low), high=float(high))

    def basis(self) -> dict[str, Any]:
        repeats = len(self.block_lengths)
        return {
            "confidence": self.rule.confidence,
            "method": BOOTSTRAP_METHOD,
            "resamples": self.rule.resamples,
            "seed": self.rule.seed,
            "repeats": repeats,
            "block_lengths": self.block_lengths,
            "pooling": pooling_rule(repeats),
            "covers": COVERS_ONE_RUN if repeats == 1 else COVERS_REPEATS,
        }

    def intervals(self) -> TimingIntervals:
        return TimingIntervals(**self.basis(), **{name: self.interval(name) for name in TIMING_STATISTICS})

    def draws(self) -> TimingDraws:
        """As the run's summary holds them (every value and replicate exact: JSON keeps a float's digits)."""
        names = list(TIMING_STATISTICS)
        return TimingDraws(
            values={name: float(value) for name, value in zip(names, self.values)},
            per_repeat=[{name: float(v) for name, v in zip(names, row)} for row in self.per_repeat],
            block_lengths=[float(length) for length in self.block_lengths],
            replicates={name: self.replicates[:, column].tolist() for column, name in enumerate(names)},
        )

    @classmethod
    def of_summary(cls, summary: RunSummary) -> TimingReplicates | None:
        """The run summary's bootstrap (None when it has none), under the interval settings it was drawn
        with (the defaults where the summary pooled repeats without settings of its own)."""
        if summary.timing is None:
            return None
        return cls.from_draws(summary.timing, summary.interval_rule or IntervalRule())

    @classmethod
    def from_draws(cls, draws: TimingDraws, rule: IntervalRule) -> TimingReplicates:
        """The replicates the run's summary holds, drawn under ``rule`` (the summary's interval rule)."""
        names = list(TIMING_STATISTICS)
        return cls(
            np.array([draws.values[name] for name in names], dtype=float),
            np.column_stack([np.asarray(draws.replicates[name], dtype=float) for name in names]),
            np.array([[row[name] for name in names] for row in draws.per_repeat], dtype=float),
            list(draws.block_lengths),
            rule,
        )


def ratio_interval(value: TimingReplicates, reference: TimingReplicates, name: str) -> Interval | None:
    """The interval of statistic ``name``'s ratio of two independent runs (each resampled on its own, with
    its own repeats): the percentile interval of the ratio of their replicates."""
    column = list(TIMING_STATISTICS).index(name)
    if not np.isfinite(reference.values[column]) or not reference.values[column]:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = value.replicates / reference.replicates
    return TimingReplicates(
        value.values / reference.values, ratios, value.per_repeat, value.block_lengths, value.rule
    ).interval(name)
