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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

STEP_TIME = "step_time(s)"
MICRO_STEP_TIME = "micro_step_time(s)"
TOKENS_PER_S = "tokens_per_s"
DEVICE_PEAK = "memory/device_peak(GiB)"
OVERFLOW_REASON = "fp16_overflow"

STATISTICS: dict[str, Callable[[pd.Series], float]] = {
    "median": lambda series: float(series.median()),
    "p90": lambda series: float(series.quantile(0.9)),
    "max": lambda series: float(series.max()),
}


def loss_scaler_present(steps: pd.DataFrame) -> bool:
    """Whether the run had an fp16 dynamic loss scaler (it recorded a loss scale at some step)."""
    return "loss_scale" in steps.columns and bool(steps["loss_scale"].notna().any())


def overflow_skipped(steps: pd.DataFrame) -> pd.Series | None:
    """Per row: did fp16's loss scaler skip this optimizer step? None when the run had no loss scaler."""
    if not loss_scaler_present(steps) or "skip_reason" not in steps.columns:
        return None
    return (steps["skip_reason"] == OVERFLOW_REASON).astype(bool)


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
    return SlowestRank(float(values.max()), int(values.idxmax()),
                       {int(rank): float(value) for rank, value in values.items()})


def step_time(steps: pd.DataFrame, warmup_steps: int, statistic: str = "median") -> SlowestRank:
    """Optimizer-step wall time over the timed steps, slowest rank."""
    return slowest_rank(timed_steps(steps, warmup_steps), STEP_TIME, statistic)


def micro_step_time(steps: pd.DataFrame, warmup_steps: int, statistic: str = "median") -> SlowestRank:
    """Micro-step wall time over the timed steps, slowest rank."""
    return slowest_rank(timed_steps(steps, warmup_steps), MICRO_STEP_TIME, statistic)


def tokens_per_second(steps: pd.DataFrame, warmup_steps: int) -> float:
    """Tokens per second summed over ranks at each timed step, median over steps."""
    return float(timed_steps(steps, warmup_steps).groupby("step")[TOKENS_PER_S].sum().median())


def peak_memory_per_rank(steps: pd.DataFrame, metric: str = DEVICE_PEAK) -> dict[int, float]:
    """Each rank's largest per-step peak of ``metric`` over the whole run (warm-up included: memory
    peaks early, and the claim is about the peak)."""
    return {int(rank): float(value) for rank, value in steps.groupby("rank")[metric].max().items()}
