"""Every quantity zerogate measures from a run's step records, defined once.

The gates, the report's run summary, the figures, ``compare``, the variant table, the run registry and
the benchmarks all call these functions; none of them computes its own median, warm-up cut or skip
count. ``steps`` is parse_logs' table: one row per (rank, optimizer step), columns as
``zerogate.train.metrics`` writes them (units in the key: ``step_time(s)``, ``memory/device_peak(GiB)``).

Definitions
- Warm-up: the first ``warmup_steps`` optimizer steps (profile key ``training.warmup_steps_excluded``,
  an analysis setting: changing it re-judges, never retrains).
- fp16-overflow-skipped step: a step whose record says ``skip_reason == "fp16_overflow"``, in a run that
  recorded a loss scale. A run without a loss scaler (fp32, bf16) has no such steps to count: the flags
  are ``None`` ("not measured"), never all-False.
- Timed steps: optimizer steps after the warm-up that fp16 did not skip (a skipped step does no update,
  so it would flatter the step time).
- Slowest-rank statistic: the statistic (median, p90, max) of each rank's own series, then the largest
  over ranks. The slowest rank sets the pace of a synchronous data-parallel run, and a per-rank
  statistic keeps one rank's outlier step from being paired with another rank's.
- Throughput: tokens per second summed over ranks at each step, then the median over timed steps.
- Peak memory per rank: each rank's largest per-step peak over the whole run (warm-up included: memory
  peaks early, and the claims are about the peak).
- fp16 overflow skips of a run: per rank, the steps fp16 skipped over the whole run and their share of
  the rank's steps; the run's figure is the worst rank's. The only source is the step records'
  ``skip_reason``: DeepSpeed's progress line (``skipped=``) and its cumulative counter also count updates
  the loss stabiliser dropped, so they are evidence at most, never the statistic.
- Loss series: the lowest rank's logged loss per step (the loss is all-reduced, so every rank logs the
  same series). Smoothed loss: its centred rolling median, window ~5 % of the run (at least 5 steps).
- Record completeness, faults and run completion: zerogate.analysis.health. Loss spikes and convergence:
  zerogate.analysis.loss_trend. Compute, communication and wait per rank, and the straggler:
  zerogate.analysis.rank_balance. The timing statistics' intervals: zerogate.analysis.intervals. The run's
  statistics as one record: zerogate.analysis.summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from zerogate.analysis.columns import (
    DEVICE_PEAK,
    LOSS,
    LOSS_SCALE,
    MICRO_STEP_TIME,
    SKIP_REASON,
    STEP_TIME,
    TOKENS_PER_S,
)
from zerogate.contracts.records import OVERFLOW_REASON


def _complete(series: pd.Series) -> np.ndarray | None:
    """The series as floats, or None when any value is missing or non-finite (or there is none): a
    statistic over a series with a gap is NaN, never the statistic of the values that remain."""
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    return values if len(values) and np.isfinite(values).all() else None


# Each statistic over the values of a series (axis 0 of an array: one column per series). The p90 is the
# linear interpolation between order statistics (numpy's and pandas' default). The bootstrap
# (zerogate.analysis.bootstrap) applies these same functions to its resamples.
ARRAY_STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "median": lambda values: np.median(values, axis=0),
    "p90": lambda values: np.quantile(values, 0.9, axis=0),
    "max": lambda values: np.max(values, axis=0),
}


def median_of(series: pd.Series) -> float:
    values = _complete(series)
    return float("nan") if values is None else float(ARRAY_STATISTICS["median"](values))


def p90_of(series: pd.Series) -> float:
    """The 90th percentile (ARRAY_STATISTICS)."""
    values = _complete(series)
    return float("nan") if values is None else float(ARRAY_STATISTICS["p90"](values))


def max_of(series: pd.Series) -> float:
    values = _complete(series)
    return float("nan") if values is None else float(ARRAY_STATISTICS["max"](values))


STATISTICS: dict[str, Callable[[pd.Series], float]] = {"median": median_of, "p90": p90_of, "max": max_of}


def loss_scaler_present(steps: pd.DataFrame) -> bool:
    """Whether the run had an fp16 dynamic loss scaler (it recorded a loss scale at some step)."""
    return LOSS_SCALE in steps.columns and bool(steps[LOSS_SCALE].notna().any())


def overflow_skipped(steps: pd.DataFrame) -> pd.Series | None:
    """Per row: did fp16's loss scaler skip this optimizer step? None when the run had no loss scaler."""
    if not loss_scaler_present(steps) or SKIP_REASON not in steps.columns:
        return None
    return (steps[SKIP_REASON] == OVERFLOW_REASON).astype(bool)


def after_warmup(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    return steps[steps["step"] > warmup_steps]


def timed_steps(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """The rows that count for timing: after the warm-up, and not skipped by fp16."""
    kept = steps["step"] > warmup_steps
    skipped = overflow_skipped(steps)
    if skipped is not None:
        kept &= ~skipped
    return steps[kept]


def overflow_skipped_count(steps: pd.DataFrame, warmup_steps: int) -> int | None:
    """fp16-skipped steps after the warm-up, on the rank that skipped most; None without a loss scaler."""
    later = after_warmup(steps, warmup_steps)
    skipped = overflow_skipped(later)
    if skipped is None:
        return None
    return int(skipped.groupby(later["rank"]).sum().max()) if len(later) else 0


def per_rank(steps: pd.DataFrame, metric: str, statistic: str) -> pd.Series:
    """The statistic of each rank's own series of ``metric`` (index: rank)."""
    return steps.groupby("rank")[metric].agg(STATISTICS[statistic])


@dataclass(frozen=True)
class SlowestRank:
    """A slowest-rank statistic with the per-rank values it was taken from."""

    value: float
    rank: int
    per_rank: dict[int, float]


def slowest_rank(steps: pd.DataFrame, metric: str, statistic: str) -> SlowestRank:
    """The statistic per rank, then the largest over ranks (see the module's definitions)."""
    values = per_rank(steps, metric, statistic)
    shown = {int(rank): float(value) for rank, value in values.items()}
    gaps = [rank for rank, value in shown.items() if not np.isfinite(value)]
    if gaps or not shown:  # a rank with a gap has no statistic, so neither has the run
        return SlowestRank(float("nan"), gaps[0] if gaps else -1, shown)
    return SlowestRank(float(values.max()), int(values.idxmax()), shown)


def step_time(steps: pd.DataFrame, warmup_steps: int, statistic: str = "median") -> SlowestRank:
    """Optimizer-step wall time over the timed steps, slowest rank."""
    return slowest_rank(timed_steps(steps, warmup_steps), STEP_TIME, statistic)


def micro_step_time(steps: pd.DataFrame, warmup_steps: int, statistic: str = "median") -> SlowestRank:
    """Micro-step wall time over the timed steps, slowest rank."""
    return slowest_rank(timed_steps(steps, warmup_steps), MICRO_STEP_TIME, statistic)


def tokens_per_second(steps: pd.DataFrame, warmup_steps: int) -> float:
    """Tokens per second summed over ranks at each timed step, median over steps."""
    per_step = (
        timed_steps(steps, warmup_steps).groupby("step")[TOKENS_PER_S].agg(lambda s: s.sum(skipna=False))
    )
    return STATISTICS["median"](per_step)


def peak_memory_per_rank(steps: pd.DataFrame, metric: str = DEVICE_PEAK) -> dict[int, float]:
    """Each rank's largest per-step peak of ``metric`` over the whole run (warm-up included: memory
    peaks early, and the claim is about the peak). A rank with a missing or non-finite value at any step
    has no peak (NaN): the largest of the values it has could be below the one it lost."""
    if metric not in steps.columns or steps[metric].isna().all():  # not measured by this run
        return {}
    peaks = steps.groupby("rank")[metric].agg(STATISTICS["max"])
    return {int(rank): float(value) for rank, value in peaks.items()}


def step_time_per_step(steps: pd.DataFrame) -> pd.Series:
    """A curve, not a statistic: each optimizer step's wall time on its slowest rank (index: step), the
    pace of a synchronous step; for figures that overlay runs."""
    return steps.groupby("step")[STEP_TIME].max()


def loss_series(steps: pd.DataFrame) -> pd.Series:
    """The logged loss per optimizer step (index: step), from the lowest rank: the loss is all-reduced,
    so every rank holds the same series. Non-finite values are kept."""
    first = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
    return pd.Series(
        pd.to_numeric(first[LOSS], errors="coerce").astype(float).to_numpy(),
        index=first["step"].to_numpy(),
        name=LOSS,
    )


def smooth(series: pd.Series) -> pd.Series:
    """Centred rolling median, window ~5 % of the run (at least 5 steps)."""
    window = max(5, len(series) // 20) | 1
    return series.rolling(window, center=True, min_periods=1).median()


@dataclass(frozen=True)
class OverflowSkips:
    """fp16 overflow skips over the whole run, per rank and for the worst rank."""

    per_rank: dict[int, int]
    fraction_per_rank: dict[int, float]
    worst_count: int
    worst_fraction: float


def overflow_skips(steps: pd.DataFrame) -> OverflowSkips | None:
    """The steps fp16 skipped over the whole run, per rank; None without a loss scaler (not measured)."""
    skipped = overflow_skipped(steps)
    if skipped is None:
        return None
    by_rank = skipped.groupby(steps["rank"])
    counts = {int(rank): int(value) for rank, value in by_rank.sum().items()}
    fractions = {int(rank): float(value) for rank, value in by_rank.mean().items()}
    return OverflowSkips(
        counts, fractions, max(counts.values(), default=0), max(fractions.values(), default=0.0)
    )


# --- Intervals ---------------------------------------------------------------------------------------------
