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
- Loss spike: the loss stabiliser's rule (zerogate.train.stabiliser), replayed on the recorded series
  with the profile's ``stabiliser`` settings (``spike_window``, ``spike_threshold``,
  ``spike_min_history``): a finite loss whose robust z-score (zerogate.robust.robust_z: median and
  MAD x 1.4826 of the history) exceeds the threshold, once the history holds ``spike_min_history``
  losses. The history is the last ``spike_window`` losses of steps whose update was applied
  (``update_applied`` where recorded) and that were not spikes themselves.
- Run completion: the run finished (it wrote its summary), and every rank recorded every optimizer
  step and neither raised, exited non-zero nor hit a fatal loss-scale error. The failed ranks are the
  ranks that did one of those; a run that stopped without saying which rank counts one unknown rank.
  Both the ``ranks_completed`` gate and the ``zero_nonfinite`` gate's completion check read this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from zerogate.robust import robust_z

STEP_TIME = "step_time(s)"
MICRO_STEP_TIME = "micro_step_time(s)"
TOKENS_PER_S = "tokens_per_s"
DEVICE_PEAK = "memory/device_peak(GiB)"
LOSS = "loss"
OVERFLOW_REASON = "fp16_overflow"
# Where the training loop records whether a step's update was applied (absent in older records).
UPDATE_APPLIED = "update_applied"

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
    peaks early, and the claim is about the peak). Ranks that never recorded ``metric`` are left out."""
    if metric not in steps.columns:
        return {}
    peaks = pd.to_numeric(steps[metric], errors="coerce").groupby(steps["rank"]).max().dropna()
    return {int(rank): float(value) for rank, value in peaks.items()}


def step_time_per_step(steps: pd.DataFrame) -> pd.Series:
    """A curve, not a statistic: each optimizer step's wall time on its slowest rank (index: step), the
    pace of a synchronous step; for figures that overlay runs."""
    return steps.groupby("step")[STEP_TIME].max()


def loss_series(steps: pd.DataFrame) -> pd.Series:
    """The logged loss per optimizer step (index: step), from the lowest rank: the loss is all-reduced,
    so every rank holds the same series. Non-finite values are kept."""
    first = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
    return pd.Series(pd.to_numeric(first[LOSS], errors="coerce").astype(float).to_numpy(), index=first["step"].to_numpy(),
                     name=LOSS)


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
    return OverflowSkips(counts, fractions, max(counts.values(), default=0), max(fractions.values(), default=0.0))


@dataclass(frozen=True)
class SpikeRule:
    """The loss stabiliser's spike rule, from the profile's ``stabiliser`` settings (defaults filled in by
    zerogate.config.settings, the one place they live; the rules pass them in)."""

    window: int
    threshold: float
    min_history: int

    @classmethod
    def from_settings(cls, stabiliser: Mapping[str, Any]) -> SpikeRule:
        """From resolved ``stabiliser`` settings (``spike_window``, ``spike_threshold``, ``spike_min_history``)."""
        return cls(int(stabiliser["spike_window"]), float(stabiliser["spike_threshold"]),
                   int(stabiliser["spike_min_history"]))

    def describe(self) -> str:
        return (f"robust z > {self.threshold:g} against the last {self.window} applied, non-spike losses "
                f"(judged from {self.min_history} of them on)")


@dataclass(frozen=True)
class Spikes:
    """The loss spikes of a run under ``rule``: how many, and at which optimizer steps."""

    count: int
    steps: list[int]
    rule: SpikeRule


def loss_spikes(steps: pd.DataFrame, rule: SpikeRule) -> Spikes:
    """Replay the loss stabiliser's spike rule over the recorded loss series (see the module's definitions)."""
    series = loss_series(steps)
    applied = None
    if UPDATE_APPLIED in steps.columns:
        first = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
        applied = first[UPDATE_APPLIED].to_numpy()
    history: list[float] = []
    found: list[int] = []
    for position, (step, loss) in enumerate(series.items()):
        if not np.isfinite(loss):
            continue
        if len(history) >= rule.min_history:
            z = robust_z(float(loss), history[-rule.window:])
            if z is not None and z > rule.threshold:
                found.append(int(step))
                continue
        if applied is None or applied[position] is None or pd.isna(applied[position]) or bool(applied[position]):
            history.append(float(loss))
    return Spikes(len(found), found, rule)


@dataclass(frozen=True)
class Completion:
    """Did the run complete? (see the module's definitions)"""

    finished: bool
    expected_steps: int | None
    steps_per_rank: dict[int, int]
    stopped_early: dict[int, int]
    failures: list[dict[str, Any]] = field(default_factory=list)
    failed_ranks: list[int] = field(default_factory=list)
    failed_rank_count: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def run_completion(steps_per_rank: Mapping[Any, int], failures: list[dict[str, Any]], finished: bool,
                   expected_steps: int | None, world_size: int | None = None) -> Completion:
    """Completion from the run's facts: the last step each rank recorded, the failures read from the
    launcher log (rank, kind, message), whether the run wrote its summary, and the steps it was to do."""
    per_rank = {int(rank): int(step) for rank, step in steps_per_rank.items()}
    if world_size:
        per_rank = {rank: per_rank.get(rank, 0) for rank in range(int(world_size))} | per_rank
    stopped = {rank: step for rank, step in sorted(per_rank.items()) if expected_steps and step < expected_steps}
    crashed = {int(f["rank"]) for f in failures if f.get("rank") is not None}
    failed = sorted(crashed | set(stopped))
    count = len(failed) or (0 if finished and not failures else 1)  # stopped without saying which rank: one
    problems = []
    if not finished:
        problems.append("the training run did not finish (no summary)")
    if stopped:
        problems.append(f"ranks stopped early: {stopped} of {expected_steps} steps")
    if failures:
        first = failures[0]
        problems.append(f"rank {first.get('rank')} failed: {first.get('message')}")
    return Completion(bool(finished), expected_steps, per_rank, stopped, list(failures), failed, count, problems)


def completion_of(run_meta: Mapping[str, Any]) -> Completion:
    """Completion from parse_logs' run metadata (``parsed/run.json``; its rank keys may be strings)."""
    return run_completion(run_meta["steps_completed_per_rank"], run_meta.get("failures") or [],
                          bool(run_meta["finished"]), run_meta.get("expected_steps"), run_meta.get("world_size"))


def _or_none(compute: Callable[[], float], *columns: str, steps: pd.DataFrame) -> float | None:
    """``compute()``, or None when the rows lack a column it needs (older or partial records) or hold no
    value of it (no timed step: a run shorter than its warm-up)."""
    if any(column not in steps.columns or steps[column].isna().all() for column in columns):
        return None
    return compute()


def run_statistics(steps: pd.DataFrame, warmup_steps: int, spike_rule: SpikeRule,
                   completion: Completion | None = None) -> dict[str, Any]:
    """The headline statistics of one run, keys with units: what the report's run summary, the run
    registry, ``compare`` and the variant table show. Each value is one of the definitions above; None
    where the records do not hold it (``overflow_skipped_steps`` without a loss scaler, the completion
    without the run's metadata)."""
    skips = overflow_skips(steps)
    loss = loss_series(steps)
    finite = loss[np.isfinite(loss)]
    timed = timed_steps(steps, warmup_steps)
    return {
        "ranks": int(steps["rank"].nunique()),
        "optimizer_steps": int(steps["step"].max()),
        "warmup_steps_excluded": int(warmup_steps),
        "timed_steps": int(timed["step"].nunique()),
        "step_time_median(s)": _or_none(lambda: step_time(steps, warmup_steps).value, STEP_TIME, steps=timed),
        "step_time_p90(s)": _or_none(lambda: step_time(steps, warmup_steps, "p90").value, STEP_TIME, steps=timed),
        "slowest_rank": _or_none(lambda: step_time(steps, warmup_steps).rank, STEP_TIME, steps=timed),
        "micro_step_time_median(s)": _or_none(lambda: micro_step_time(steps, warmup_steps).value, MICRO_STEP_TIME,
                                              steps=timed),
        "tokens_per_s": _or_none(lambda: tokens_per_second(steps, warmup_steps), TOKENS_PER_S, steps=timed),
        "first_loss": float(finite.iloc[0]) if len(finite) else None,
        "final_loss": float(finite.iloc[-1]) if len(finite) else None,
        "loss_spikes": loss_spikes(steps, spike_rule).count,
        "overflow_skipped_steps": None if skips is None else skips.worst_count,
        "peak_memory_per_rank(GiB)": peak_memory_per_rank(steps),
        "run_complete": None if completion is None else completion.complete,
        "failed_ranks": None if completion is None else completion.failed_rank_count,
    }
