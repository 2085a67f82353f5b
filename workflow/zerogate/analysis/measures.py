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
  MAD x 1.4826 of the history) exceeds the threshold -- upward only, z > threshold, as the stabiliser
  judges at training time (a sudden drop is not a spike), once the history holds ``spike_min_history``
  losses. The history is the last ``spike_window`` losses of steps whose update was applied
  (``update_applied`` where recorded) and that were not spikes themselves.
- Record completeness (counts, never the highest step): every rank of the world size (the run spec's)
  has records, each optimizer step 1..expected exactly once per rank (a resumed or rolled-back run's
  files hold every step once: zerogate.train.checkpoint), and no records of other ranks or steps.
  A statistic over a metric that is missing or non-finite at some step is NaN, never the statistic of
  the values that remain (``missing_values`` names the gaps).
- Fault (non-finite event): one per optimizer step at which any rank's records hold a non-finite loss
  or gradient norm, or the loss stabiliser caught one, whatever the policy and however many ranks saw
  it; the ranks are listed.
- Loss convergence: ``loss_convergence`` below, over every step's loss, settings from the gate's
  ``convergence`` block in the profile.
- Compute, communication and wait per rank (who waits for whom). Each rank's record holds
  ``collectives(s)``: the host time it spent inside torch.distributed collectives during the optimizer
  step (zerogate.train.metrics.CollectiveClock: the calls DeepSpeed issues inside every micro-step --
  ZeRO-3's parameter all-gathers and gradient reductions, timed at the handle's wait() when asynchronous
  -- and the loop's boundary all-reduce; no synchronisation added). In a collective a rank waits for the
  last rank to arrive, then the transfer takes the same time on every rank. So, per timed optimizer step:
  communication(s) = the smallest ``collectives(s)`` over the ranks (the transfer, latency included, that
  no rank avoids); wait(s) of a rank = its ``collectives(s)`` - communication(s) (the time it sat in
  collectives waiting for the others); compute(s) = its ``step_time(s)`` - its ``collectives(s)``
  (everything else: forward, backward, optimizer, host work). Summing over the step's collectives before
  taking the minimum makes wait a lower bound where different ranks are late at different collectives.
  Per rank the statistic is the median over the timed steps (sums over them for totals). Defined only
  when every rank of the world size recorded both times at every timed step, on the CPU accelerator
  (on CUDA, NCCL returns once the work is queued, so host time says nothing about the device's wait).
- Straggler: the rank with the largest median compute(s), named when it exceeds every other rank's by
  more than ``STRAGGLER_MARGIN`` of the median optimizer-step time (slowest rank); below that the ranks
  differ by noise and none is named. How much slower: its median compute(s) minus the next slowest
  rank's, and that as a share of the latter's. The others wait for it: each other rank's median wait(s)
  per step (and the sum over the timed steps).
- Run completion: the run finished (it wrote its summary), and every rank recorded every optimizer
  step and neither raised, exited non-zero nor hit a fatal loss-scale error. The failed ranks are the
  ranks that did one of those; a run that stopped without saying which rank counts one unknown rank.
  Both the ``ranks_completed`` gate and the ``zero_nonfinite`` gate's completion check read this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from zerogate.config.judging import GateSettings, IntervalSettings
from zerogate.config.training import StabiliserSettings
from zerogate.contracts.intervals import Interval, TimingIntervals
from zerogate.contracts.parsed import Failure, RunMeta
from zerogate.contracts.records import OVERFLOW_REASON, column
from zerogate.contracts.report import RunStatistics
from zerogate.contracts.verdicts import NonfiniteEventEvidence, RecordEvidence
from zerogate.robust import MAD_TO_SIGMA, robust_z

# The steps table's columns the statistics read: the StepRecord's keys (zerogate.contracts.records).
STEP_TIME = column("step_time_s")
MICRO_STEP_TIME = column("micro_step_time_s")
TOKENS_PER_S = column("tokens_per_s")
DEVICE_PEAK = column("device_peak_gib")
LOSS = column("loss")
LOSS_SCALE = column("loss_scale")
SKIP_REASON = column("skip_reason")
UPDATE_APPLIED = column("update_applied")
# A rank's host time inside collectives per optimizer step, and what the analysis derives from it (see
# "Compute, communication and wait per rank").
COLLECTIVES_TIME = column("collectives_s")
COMPUTE = "compute(s)"
COMMUNICATION = "communication(s)"
WAIT = "wait(s)"
# A straggler is named when its median compute exceeds every other rank's by more than this share of the
# median optimizer-step time: smaller differences are the machine's noise (two identical ranks on a shared
# 2-core machine differed by 4 % of the step time in the smoke run).
STRAGGLER_MARGIN = 0.10


def _complete(series: pd.Series) -> np.ndarray | None:
    """The series as floats, or None when any value is missing or non-finite (or there is none): a
    statistic over a series with a gap is NaN, never the statistic of the values that remain."""
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    return values if len(values) and np.isfinite(values).all() else None


# Each statistic over the values of a series (axis 0 of an array: one column per series). The p90 is the
# linear interpolation between order statistics (numpy's and pandas' default). The bootstrap below applies
# these same functions to its resamples.
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


@dataclass(frozen=True)
class SpikeRule:
    """The loss stabiliser's spike rule, from the profile's ``stabiliser`` settings (defaults filled in by
    zerogate.config.training, the one place they live; the rules pass them in)."""

    window: int
    threshold: float
    min_history: int

    @classmethod
    def from_settings(cls, stabiliser: StabiliserSettings) -> SpikeRule:
        """From the run's ``stabiliser`` settings (train/settings.json)."""
        return cls(
            int(stabiliser.spike_window), float(stabiliser.spike_threshold), int(stabiliser.spike_min_history)
        )

    def describe(self) -> str:
        return (
            f"upward only: robust z > {self.threshold:g} against the last {self.window} applied, non-spike "
            f"losses (judged from {self.min_history} of them on); a sudden drop is not a spike"
        )


@dataclass(frozen=True)
class Spikes:
    """The loss spikes of a run under ``rule``: how many, and at which optimizer steps."""

    count: int
    steps: list[int]
    rule: SpikeRule


def loss_spikes(steps: pd.DataFrame, rule: SpikeRule) -> Spikes:
    """Replay the loss stabiliser's spike rule over the recorded loss series (see the module's
    definitions)."""
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
            z = robust_z(float(loss), history[-rule.window :])
            if z is not None and z > rule.threshold:
                found.append(int(step))
                continue
        if (
            applied is None
            or applied[position] is None
            or pd.isna(applied[position])
            or bool(applied[position])
        ):
            history.append(float(loss))
    return Spikes(len(found), found, rule)


@dataclass(frozen=True)
class RecordCompleteness:
    """Whether the step records hold the whole run, from counts (never from the highest step): every rank
    of the world size present, and each expected optimizer step exactly once per rank."""

    world_size: int | None
    expected_steps: int | None
    ranks_present: list[int]
    missing_ranks: list[int]
    missing_steps: dict[int, list[int]]
    repeated_steps: dict[int, list[int]]
    unexpected_steps: dict[int, list[int]]
    extra_ranks: list[int]
    steps_per_rank: dict[int, int] = field(
        default_factory=dict
    )  # distinct optimizer steps each rank recorded

    @property
    def incomplete_ranks(self) -> list[int]:
        return sorted(
            set(self.missing_ranks)
            | set(self.missing_steps)
            | set(self.repeated_steps)
            | set(self.unexpected_steps)
            | set(self.extra_ranks)
        )

    @property
    def problems(self) -> list[str]:
        found = []
        if self.world_size is None:
            found.append("world size unknown (no run spec or summary gives it): the ranks cannot be counted")
        if self.expected_steps is None:
            found.append("expected optimizer steps unknown: the steps cannot be counted")
        if self.missing_ranks:
            found.append(f"ranks with no step records: {self.missing_ranks} of world size {self.world_size}")
        if self.extra_ranks:
            found.append(f"records of ranks outside the world size {self.world_size}: {self.extra_ranks}")
        for label, table in (
            ("missing", self.missing_steps),
            ("recorded more than once", self.repeated_steps),
            ("outside 1..expected", self.unexpected_steps),
        ):
            for rank, listed in table.items():
                found.append(f"rank {rank}: {len(listed)} steps {label} ({_span(listed)})")
        return found

    @property
    def complete(self) -> bool:
        return not self.problems

    def evidence(self) -> RecordEvidence:
        return RecordEvidence(
            world_size=self.world_size,
            expected_steps=self.expected_steps,
            ranks_present=self.ranks_present,
            missing_ranks=self.missing_ranks,
            extra_ranks=self.extra_ranks,
            steps_per_rank=self.steps_per_rank,
            missing_steps={r: _span(v) for r, v in self.missing_steps.items()},
            repeated_steps={r: _span(v) for r, v in self.repeated_steps.items()},
            unexpected_steps={r: _span(v) for r, v in self.unexpected_steps.items()},
        )


def _span(numbers: list[int], shown: int = 8) -> str:
    """Step numbers for a message: the first few, then how many more."""
    head = ", ".join(str(n) for n in numbers[:shown])
    return head + (f" and {len(numbers) - shown} more" if len(numbers) > shown else "")


def record_completeness(
    steps: pd.DataFrame, world_size: int | None, expected_steps: int | None
) -> RecordCompleteness:
    """Count the step records: which ranks of ``range(world_size)`` are present, and per rank which of the
    optimizer steps ``1..expected_steps`` are missing, recorded more than once, or not expected at all."""
    present = sorted(int(r) for r in steps["rank"].dropna().unique()) if len(steps) else []
    missing_ranks = [r for r in range(int(world_size))] if world_size else []
    missing_ranks = [r for r in missing_ranks if r not in present]
    missing: dict[int, list[int]] = {}
    repeated: dict[int, list[int]] = {}
    unexpected: dict[int, list[int]] = {}
    distinct: dict[int, int] = {}
    expected = set(range(1, int(expected_steps) + 1)) if expected_steps else None
    for rank in present:
        numbers = pd.to_numeric(steps.loc[steps["rank"] == rank, "step"], errors="coerce")
        counts = numbers.value_counts()
        seen = {int(n) for n in counts.index}
        distinct[rank] = len(seen)
        if expected is not None:
            if expected - seen:
                missing[rank] = sorted(expected - seen)
            if seen - expected:
                unexpected[rank] = sorted(seen - expected)
        if (counts > 1).any():
            repeated[rank] = sorted(int(n) for n in counts[counts > 1].index)
    extra = [r for r in present if world_size and not 0 <= r < int(world_size)]
    return RecordCompleteness(
        int(world_size) if world_size else None,
        int(expected_steps) if expected_steps else None,
        present,
        missing_ranks,
        missing,
        repeated,
        unexpected,
        extra,
        distinct,
    )


def missing_values(steps: pd.DataFrame, metric: str) -> dict[int, list[int]]:
    """Per rank, the steps whose ``metric`` is missing (null) or non-finite (index: rank; empty when none)."""
    values = pd.to_numeric(steps[metric], errors="coerce").astype(float)
    bad = steps[~np.isfinite(values)]
    return {int(rank): sorted(int(s) for s in group["step"]) for rank, group in bad.groupby("rank")}


@dataclass(frozen=True)
class NonfiniteEvent:
    """One optimizer step at which some rank saw a non-finite loss or gradient norm."""

    step: int
    ranks: list[int]
    metrics: list[str]
    sources: list[str]

    def evidence(self) -> NonfiniteEventEvidence:
        return NonfiniteEventEvidence(
            step=self.step, ranks=self.ranks, metrics=self.metrics, sources=self.sources
        )


def nonfinite_events(
    steps: pd.DataFrame, metrics: list[str], caught: list[tuple[int, int | None, str]]
) -> list[NonfiniteEvent]:
    """Faults, one per optimizer step however many ranks saw it and whatever the stabiliser's policy:
    the steps whose records hold a non-finite value of ``metrics`` (a null loss was non-finite; a null
    gradient norm means DeepSpeed returned none), joined with the steps the loss stabiliser caught
    (``caught``: step, rank, kind; its rollback removes the bad step's record)."""
    found: dict[int, dict[str, set]] = {}

    def note(step: int, rank: int | None, metric: str, source: str) -> None:
        entry = found.setdefault(int(step), {"ranks": set(), "metrics": set(), "sources": set()})
        if rank is not None:
            entry["ranks"].add(int(rank))
        entry["metrics"].add(metric)
        entry["sources"].add(source)

    for metric in metrics:
        if metric not in steps.columns:
            continue
        values = pd.to_numeric(steps[metric], errors="coerce").astype(float)
        bad = ~np.isfinite(values) if metric == LOSS else (values.notna() & ~np.isfinite(values))
        for step, rank in zip(steps.loc[bad, "step"], steps.loc[bad, "rank"]):
            note(int(step), int(rank), metric, "step records")
    for step, rank, kind in caught:
        note(step, rank, kind.removeprefix("nonfinite_"), "loss stabiliser")
    return [
        NonfiniteEvent(step, sorted(e["ranks"]), sorted(e["metrics"]), sorted(e["sources"]))
        for step, e in sorted(found.items())
    ]


@dataclass(frozen=True)
class ConvergenceRule:
    """The loss-convergence definition's settings, from the gate's ``convergence`` block in the profile."""

    initial_steps: int
    final_fraction: float
    max_rebound: float
    min_drop_sigmas: float

    @classmethod
    def from_gate(cls, gate: GateSettings) -> ConvergenceRule:
        block = gate.convergence
        if block is None:
            raise ValueError(f"gate {gate.name}: a loss_convergence gate needs its convergence block")
        return cls(
            int(block.initial_steps),
            float(block.final_fraction),
            float(block.max_rebound),
            float(block.min_drop_sigmas),
        )


@dataclass(frozen=True)
class Convergence:
    """The loss-convergence statistic of one run (see the profile's loss_convergence definition)."""

    steps: int
    nonfinite_steps: list[int]
    initial: float
    final: float
    lowest_block: float
    final_spread: float
    ratio: float
    rebound: float
    drop_sigmas: float

    def problems(self, rule: ConvergenceRule) -> list[str]:
        found = []
        if self.nonfinite_steps:
            found.append(
                f"non-finite loss at {len(self.nonfinite_steps)} steps ({_span(self.nonfinite_steps)})"
            )
            return found
        if not self.drop_sigmas >= rule.min_drop_sigmas:
            found.append(
                f"the drop from the initial to the final loss is {self.drop_sigmas:.3g} final-block "
                f"standard deviations, not >= {rule.min_drop_sigmas:g}"
            )
        if not self.rebound <= rule.max_rebound:
            found.append(
                f"the final loss is back up {self.rebound:.3g} of the drop to the lowest block mean "
                f"(more than {rule.max_rebound:g})"
            )
        return found


def loss_convergence(steps: pd.DataFrame, rule: ConvergenceRule) -> Convergence:
    """Every optimizer step's loss (measures.loss_series), none left out:
    - initial: the median loss of the first ``initial_steps`` steps;
    - final: the mean loss of the last block, the last ``final_fraction`` of the steps (at least one);
    - blocks: consecutive blocks of that length from the end backwards; lowest block: the lowest block mean;
    - ratio = final / initial; rebound = (final - lowest block) / (initial - lowest block), 0 when the final
      block is the lowest (inf when nothing dropped); drop_sigmas = (initial - final) / the final block's
      robust standard deviation (1.4826 MAD; inf when that is 0 and the loss dropped).
    A non-finite loss anywhere makes every figure NaN and is listed."""
    series = loss_series(steps)
    values = series.to_numpy(dtype=float)
    n = len(values)
    bad = [int(step) for step, value in series.items() if not np.isfinite(value)]
    nan = float("nan")
    if bad or n == 0:
        return Convergence(n, bad, nan, nan, nan, nan, nan, nan, nan)
    block = max(1, int(round(n * rule.final_fraction)))
    initial = float(np.median(values[: max(1, rule.initial_steps)]))
    ends = range(n, 0, -block)
    means = [float(values[max(0, end - block) : end].mean()) for end in ends]
    final, lowest = means[0], min(means)
    tail = values[n - block :]
    spread = float(np.median(np.abs(tail - np.median(tail)))) * MAD_TO_SIGMA
    drop = initial - final
    sigmas = drop / spread if spread > 0 else (float("inf") if drop > 0 else 0.0)
    fallen = initial - lowest
    rebound = (final - lowest) / fallen if fallen > 0 else (0.0 if final <= lowest else float("inf"))
    ratio = final / initial if initial > 0 else nan
    return Convergence(n, [], initial, final, lowest, spread, ratio, rebound, sigmas)


@dataclass(frozen=True)
class Completion:
    """Did the run complete? (see the module's definitions)"""

    finished: bool
    expected_steps: int | None
    steps_per_rank: dict[int, int]
    stopped_early: dict[int, int]
    failures: list[Failure] = field(default_factory=list)
    failed_ranks: list[int] = field(default_factory=list)
    failed_rank_count: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def run_completion(
    steps_per_rank: Mapping[Any, int],
    failures: list[Failure],
    finished: bool,
    expected_steps: int | None,
    world_size: int | None = None,
    records: RecordCompleteness | None = None,
) -> Completion:
    """Completion from the run's facts: the last step each rank recorded, the failures read from the
    launcher log (rank, kind, message), whether the run wrote its summary, and the steps it was to do.
    With ``records`` (record_completeness of the step records) the counts decide too: a rank that lacks
    a step or repeats one has failed, whatever its last step."""
    per_rank = {int(rank): int(step) for rank, step in steps_per_rank.items()}
    if world_size:
        per_rank = {rank: per_rank.get(rank, 0) for rank in range(int(world_size))} | per_rank
    stopped = {
        rank: step for rank, step in sorted(per_rank.items()) if expected_steps and step < expected_steps
    }
    crashed = {int(f.rank) for f in failures if f.rank is not None}
    gaps = set(records.incomplete_ranks) if records is not None else set()
    failed = sorted(crashed | set(stopped) | gaps)
    unnamed = not finished or bool(failures) or (records is not None and not records.complete)
    count = len(failed) or (1 if unnamed else 0)  # stopped without saying which rank: one
    problems = []
    if not finished:
        problems.append("the training run did not finish (no summary)")
    if stopped:
        problems.append(f"ranks stopped early: {stopped} of {expected_steps} steps")
    if failures:
        first = failures[0]
        problems.append(f"rank {first.rank} failed: {first.message}")
    if records is not None:
        problems += records.problems
    return Completion(
        bool(finished), expected_steps, per_rank, stopped, list(failures), failed, count, problems
    )


def completion_of(run_meta: RunMeta) -> Completion:
    """Completion from parse_logs' run metadata (``parsed/run.json``)."""
    return run_completion(
        run_meta.steps_completed_per_rank,
        run_meta.failures,
        run_meta.finished,
        run_meta.expected_steps,
        run_meta.world_size,
    )


def rank_times(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """Per (rank, timed step): step_time(s), collectives(s), communication(s), wait(s), compute(s) (see the
    module's definitions). A step where some rank's value is missing has no communication(s) and so no
    wait(s) for any rank (NaN)."""
    timed = timed_steps(steps, warmup_steps)
    frame = pd.DataFrame(
        {
            "rank": timed["rank"].astype(int),
            "step": timed["step"].astype(int),
            STEP_TIME: pd.to_numeric(timed[STEP_TIME], errors="coerce").astype(float),
            COLLECTIVES_TIME: pd.to_numeric(timed[COLLECTIVES_TIME], errors="coerce").astype(float)
            if COLLECTIVES_TIME in timed.columns
            else float("nan"),
        }
    )
    frame[COMMUNICATION] = frame.groupby("step")[COLLECTIVES_TIME].transform(lambda s: s.min(skipna=False))
    frame[WAIT] = frame[COLLECTIVES_TIME] - frame[COMMUNICATION]
    frame[COMPUTE] = frame[STEP_TIME] - frame[COLLECTIVES_TIME]
    return frame.sort_values(["rank", "step"]).reset_index(drop=True)


@dataclass(frozen=True)
class RankBalance:
    """Who waits for whom: compute, communication and wait per rank, and the straggler if there is one.

    Every statistic is None (and ``problems`` says why) when the records cannot define it."""

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
    margin: float = STRAGGLER_MARGIN
    problems: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return not self.problems

    @property
    def waiting_for_straggler(self) -> dict[int, float]:
        """Each other rank's median wait(s) per step; empty without a straggler."""
        return {} if self.straggler is None else {r: w for r, w in self.wait.items() if r != self.straggler}

    def summary(self) -> dict[str, Any]:
        """The run statistics' straggler fields (run_statistics, zerogate.contracts.report.RunStatistics)."""
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


def _rank_time_problems(steps: pd.DataFrame, timed: pd.DataFrame, world_size: int | None) -> list[str]:
    """Why the records cannot say who waits for whom (empty when they can)."""
    if COLLECTIVES_TIME not in steps.columns or steps[COLLECTIVES_TIME].isna().all():
        return [
            f"the step records hold no {COLLECTIVES_TIME} (zerogate.train.metrics records it; a run with the "
            "metrics layer off, or from before it, has none)"
        ]
    devices = sorted(
        {str(d) for d in steps.get("device", pd.Series(dtype=str)).dropna() if str(d).startswith("cuda")}
    )
    if devices:
        return [
            f"{COLLECTIVES_TIME} is host time, and on {devices[0]} NCCL returns once a collective is queued: "
            "the device's wait is not measured"
        ]
    found = []
    present = sorted(int(r) for r in timed["rank"].unique()) if len(timed) else []
    expected = list(range(int(world_size))) if world_size else present
    missing = [r for r in expected if r not in present]
    if missing:
        found.append(f"ranks with no timed step records: {missing} of world size {len(expected)}")
    if len(expected) < 2:
        found.append("a single rank waits for no other")
    if not len(timed):
        found.append("no timed step (the run stopped within its warm-up)")
        return found
    all_steps = sorted(int(s) for s in timed["step"].unique())
    for rank in present:
        have = set(int(s) for s in timed.loc[timed["rank"] == rank, "step"])
        lacking = [s for s in all_steps if s not in have]
        if lacking:
            found.append(f"rank {rank}: {len(lacking)} timed steps missing ({_span(lacking)})")
    for metric in (STEP_TIME, COLLECTIVES_TIME):
        for rank, listed in missing_values(timed, metric).items():
            found.append(
                f"rank {rank}: {metric} missing or non-finite at {len(listed)} steps ({_span(listed)})"
            )
    return found


def rank_balance(steps: pd.DataFrame, warmup_steps: int, world_size: int | None = None) -> RankBalance:
    """Compute, communication and wait per rank over the timed steps, and the straggler (see the module's
    definitions). ``world_size``: the run's rank count (its records are counted against it); when None,
    the ranks that recorded."""
    timed = timed_steps(steps, warmup_steps)
    problems = _rank_time_problems(steps, timed, world_size)
    ranks = sorted(int(r) for r in timed["rank"].unique()) if len(timed) else []
    if problems:
        return RankBalance(
            ranks,
            int(timed["step"].nunique()) if len(timed) else 0,
            {},
            {},
            {},
            {},
            {},
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            problems=problems,
        )
    frame = rank_times(steps, warmup_steps)
    by_rank = frame.groupby("rank")
    compute = {int(r): float(v) for r, v in per_rank(frame, COMPUTE, "median").items()}
    wait = {int(r): float(v) for r, v in per_rank(frame, WAIT, "median").items()}
    totals = by_rank[[WAIT, STEP_TIME]].sum()
    wait_total = {int(r): float(v) for r, v in totals[WAIT].items()}
    wait_share = {
        int(r): float(row[WAIT] / row[STEP_TIME]) if row[STEP_TIME] > 0 else float("nan")
        for r, row in totals.iterrows()
    }
    step_medians = {int(r): float(v) for r, v in per_rank(frame, STEP_TIME, "median").items()}
    communication = median_of(frame.groupby("step")[COMMUNICATION].first())
    ordered = sorted(compute, key=lambda r: compute[r], reverse=True)
    slowest, next_slowest = ordered[0], ordered[1]
    excess = compute[slowest] - compute[next_slowest]
    ratio = excess / compute[next_slowest] if compute[next_slowest] > 0 else float("inf")
    pace = step_time(steps, warmup_steps).value
    straggler = slowest if excess > STRAGGLER_MARGIN * pace else None
    return RankBalance(
        ranks,
        int(frame["step"].nunique()),
        compute,
        wait,
        wait_total,
        wait_share,
        step_medians,
        communication,
        slowest,
        straggler,
        excess,
        ratio,
        next_slowest,
        pace,
    )


def _or_none(compute: Callable[[], float], *columns: str, steps: pd.DataFrame) -> float | None:
    """``compute()``, or None when the rows lack a column it needs (older or partial records) or hold no
    value of it (no timed step: a run shorter than its warm-up)."""
    if any(column not in steps.columns or steps[column].isna().all() for column in columns):
        return None
    return compute()


def run_statistics(
    steps: pd.DataFrame,
    warmup_steps: int,
    spike_rule: SpikeRule,
    completion: Completion | None = None,
    interval_rule: IntervalRule | None = None,
) -> RunStatistics:
    """The headline statistics of one run: what the report's run summary, the run registry, ``compare`` and
    the variant table show. Each value is one of the definitions above; None where the records do not hold
    it (``overflow_skipped_steps`` without a loss scaler, the completion without the run's metadata). With
    ``interval_rule``, the timing statistics' intervals (see "Intervals")."""
    skips = overflow_skips(steps)
    loss = loss_series(steps)
    finite = loss[np.isfinite(loss)]
    timed = timed_steps(steps, warmup_steps)
    return RunStatistics(
        ranks=int(steps["rank"].nunique()),
        optimizer_steps=int(steps["step"].max()),
        warmup_steps_excluded=int(warmup_steps),
        timed_steps=int(timed["step"].nunique()),
        step_time_median_s=_or_none(lambda: step_time(steps, warmup_steps).value, STEP_TIME, steps=timed),
        step_time_p90_s=_or_none(lambda: step_time(steps, warmup_steps, "p90").value, STEP_TIME, steps=timed),
        slowest_rank=_or_none(lambda: step_time(steps, warmup_steps).rank, STEP_TIME, steps=timed),
        micro_step_time_median_s=_or_none(
            lambda: micro_step_time(steps, warmup_steps).value, MICRO_STEP_TIME, steps=timed
        ),
        tokens_per_s=_or_none(lambda: tokens_per_second(steps, warmup_steps), TOKENS_PER_S, steps=timed),
        first_loss=float(finite.iloc[0]) if len(finite) else None,
        final_loss=float(finite.iloc[-1]) if len(finite) else None,
        loss_spikes=loss_spikes(steps, spike_rule).count,
        overflow_skipped_steps=None if skips is None else skips.worst_count,
        peak_memory_per_rank_gib=peak_memory_per_rank(steps),
        run_complete=None if completion is None else completion.complete,
        failed_ranks=None if completion is None else completion.failed_rank_count,
        **rank_balance(steps, warmup_steps).summary(),
        intervals=None if interval_rule is None else timing_intervals([steps], warmup_steps, interval_rule),
    )


def summarise_run(
    steps: pd.DataFrame,
    warmup_steps: int,
    spike_rule: SpikeRule,
    run_meta: RunMeta | None = None,
    interval_rule: IntervalRule | None = None,
) -> RunStatistics | None:
    """The run's statistics (run_statistics) with its completion from parse_logs' metadata when given: the
    report's run summary and the registry's ``summary``; None for a run that recorded no step."""
    if not len(steps):
        return None
    return run_statistics(
        steps, warmup_steps, spike_rule, completion_of(run_meta) if run_meta else None, interval_rule
    )


@dataclass(frozen=True)
class RepeatedRun:
    """A run trained ``repeats`` times: the pooled statistics and each repeat's own (the first is the run
    whose records the figures and the other gates read)."""

    pooled: RunStatistics | None
    each: list[RunStatistics | None]


def summarise_repeats(
    tables: list[pd.DataFrame],
    warmup_steps: int,
    spike_rule: SpikeRule,
    run_metas: list[RunMeta | None],
    interval_rule: IntervalRule,
) -> RepeatedRun:
    """The statistics of a run's repeats (``tables``: each repeat's steps, the first run first) and their
    pooling: each timing statistic pooled by ``pooling_rule`` with the interval over all repeats; the peak
    memory per rank the largest over the repeats (a peak); complete only when every repeat is; failed ranks
    the most of any repeat; every other field is the first repeat's. One table: that run's statistics."""
    metas = [*run_metas, *[None] * (len(tables) - len(run_metas))]  # a repeat without metadata: no completion
    each = [
        summarise_run(table, warmup_steps, spike_rule, meta, interval_rule)
        for table, meta in zip(tables, metas)
    ]
    first = each[0]
    if len(tables) == 1 or first is None or any(stats is None for stats in each):
        return RepeatedRun(first, each)
    found = timing_replicates(tables, warmup_steps, interval_rule)
    pooled: dict[str, Any] = {}
    for position, name in enumerate(TIMING_STATISTICS):
        values = [getattr(stats, name) for stats in each]
        pooled[name] = None if any(v is None for v in values) else float(pool(np.array(values, dtype=float)))
        if found is not None and pooled[name] is not None:
            pooled[name] = float(found.values[position])
    peaks: dict[int, float] = {}
    for stats in each:
        for rank, value in stats.peak_memory_per_rank_gib.items():
            peaks[rank] = max(peaks.get(rank, value), value)
    complete = [stats.run_complete for stats in each]
    failed = [stats.failed_ranks for stats in each]
    pooled.update(
        peak_memory_per_rank_gib=peaks,
        repeats=len(tables),
        run_complete=None if None in complete else all(complete),
        failed_ranks=None if None in failed else max(failed),
        intervals=None if found is None else found.intervals(),
    )
    return RepeatedRun(RunStatistics.model_validate({**first.model_dump(by_alias=False), **pooled}), each)


# --- Intervals ---------------------------------------------------------------------------------------------

# The timing statistics that carry an interval (RunStatistics field -> metric, statistic, how the ranks
# combine): the slowest rank's statistic of its own series, or the per-step sum over ranks.
TIMING_STATISTICS: dict[str, tuple[str, str, str]] = {
    "step_time_median_s": (STEP_TIME, "median", "slowest rank"),
    "step_time_p90_s": (STEP_TIME, "p90", "slowest rank"),
    "micro_step_time_median_s": (MICRO_STEP_TIME, "median", "slowest rank"),
    "tokens_per_s": (TOKENS_PER_S, "median", "sum over ranks"),
}
# Fewer timed steps than this give no interval: the block-length estimate and the bootstrap's tails need
# several blocks' worth of steps.
MIN_TIMED_STEPS = 20
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
class IntervalRule:
    """The intervals' settings (profile key ``intervals``, zerogate.config.judging.IntervalSettings)."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0

    @classmethod
    def from_settings(cls, settings: IntervalSettings) -> IntervalRule:
        return cls(float(settings.confidence), int(settings.resamples), int(settings.seed))


@dataclass(frozen=True)
class TimingSample:
    """One run's timed steps as the bootstrap resamples them: a row per timed step, the columns of every
    timing statistic side by side (each rank's value for a slowest-rank statistic, the per-step sum for
    tokens/s), so a resampled step carries all its values together."""

    steps: np.ndarray
    data: np.ndarray
    columns: dict[str, slice]
    block_length: float

    def values(self, data: np.ndarray | None = None) -> np.ndarray:
        """Each timing statistic (TIMING_STATISTICS' order) of ``data`` (default: the run's own rows)."""
        data = self.data if data is None else data
        out = []
        for name, (_, statistic, _) in TIMING_STATISTICS.items():
            part = data[:, self.columns[name]]
            out.append(float(np.max(ARRAY_STATISTICS[statistic](part))))  # one column for a sum over ranks
        return np.array(out)


def timing_sample(steps: pd.DataFrame, warmup_steps: int) -> TimingSample | None:
    """The run's timed steps for the bootstrap; None with fewer than MIN_TIMED_STEPS of them or without a
    finite step time. A rank that lacks a step another rank has leaves a gap: the statistics over that
    column are NaN, so they get no interval (as they get no value, see the definitions)."""
    timed = timed_steps(steps, warmup_steps).drop_duplicates(["step", "rank"], keep="last")
    index = np.sort(timed["step"].unique())
    if len(index) < MIN_TIMED_STEPS or STEP_TIME not in timed.columns:
        return None
    blocks, columns, start = [], {}, 0
    for name, (metric, _, over) in TIMING_STATISTICS.items():
        if metric not in timed.columns:
            part = np.full((len(index), 1), np.nan)
        elif over == "slowest rank":
            part = (
                timed.pivot(index="step", columns="rank", values=metric)
                .reindex(index)
                .apply(pd.to_numeric, errors="coerce")
                .to_numpy(dtype=float)
            )
        else:
            values = pd.to_numeric(timed[metric], errors="coerce")
            part = (
                values.groupby(timed["step"])
                .agg(lambda s: s.sum(skipna=False))
                .reindex(index)
                .to_numpy(dtype=float)
            )
            part = part.reshape(-1, 1)
        blocks.append(part)
        columns[name] = slice(start, start + part.shape[1])
        start += part.shape[1]
    data = np.hstack(blocks)
    times = data[:, columns["step_time_median_s"]]
    finite = [times[:, j] for j in range(times.shape[1]) if np.isfinite(times[:, j]).all()]
    if not finite:
        return None
    from arch.bootstrap import optimal_block_length

    estimate = optimal_block_length(np.column_stack(finite))["stationary"].max()
    block = float(min(max(1.0, estimate if np.isfinite(estimate) else 1.0), len(index) / 2))
    return TimingSample(index, data, columns, block)


def _replicates(sample: TimingSample, rule: IntervalRule, repeat: int) -> np.ndarray:
    """``rule.resamples`` stationary-bootstrap replicates of the sample's timing statistics (resamples x
    statistics), seeded by the rule's seed and the repeat's number."""
    from arch.bootstrap import StationaryBootstrap

    bootstrap = StationaryBootstrap(
        sample.block_length, sample.data, seed=np.random.default_rng([rule.seed, repeat])
    )
    return np.asarray(bootstrap.apply(sample.values, reps=rule.resamples), dtype=float).reshape(
        rule.resamples, -1
    )


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


def timing_replicates(
    tables: list[pd.DataFrame], warmup_steps: int, rule: IntervalRule
) -> TimingReplicates | None:
    """The timing statistics of the repeats ``tables`` (each one repeat's steps table), pooled, with their
    bootstrap replicates (see "Intervals" in the definitions); None when some repeat has too few timed
    steps for an interval."""
    samples = [timing_sample(table, warmup_steps) for table in tables]
    if not samples or any(sample is None for sample in samples):
        return None
    per_repeat = np.stack([sample.values() for sample in samples])  # repeats x statistics
    inner = np.stack([_replicates(sample, rule, r) for r, sample in enumerate(samples)], axis=1)  # B x N x k
    if len(samples) == 1:
        replicates = inner[:, 0, :]
    else:  # the repeats are independent runs: drawn with replacement, each draw with a replicate of its own
        rng = np.random.default_rng([rule.seed, len(samples)])
        drawn = rng.integers(0, len(samples), (rule.resamples, len(samples)))
        which = rng.integers(0, rule.resamples, (rule.resamples, len(samples)))
        replicates = pool(np.moveaxis(inner[which, drawn, :], 1, 2))
    return TimingReplicates(
        pool(per_repeat.T), replicates, per_repeat, [s.block_length for s in samples], rule
    )


def timing_intervals(
    tables: list[pd.DataFrame], warmup_steps: int, rule: IntervalRule
) -> TimingIntervals | None:
    """The interval of every timing statistic of the repeats ``tables`` (one table: one run)."""
    found = timing_replicates(tables, warmup_steps, rule)
    return None if found is None else found.intervals()


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
