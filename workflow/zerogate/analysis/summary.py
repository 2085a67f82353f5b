"""The run's statistics as the report, the registry, ``compare`` and the variants' table show them: each
value one of the definitions of zerogate.analysis.measures, health, loss_trend and rank_balance, the timing
statistics with their intervals (zerogate.analysis.intervals), the repeats pooled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.columns import MICRO_STEP_TIME, STEP_TIME, TOKENS_PER_S
from zerogate.analysis.health import Completion, completion_of, record_completeness
from zerogate.analysis.intervals import TIMING_STATISTICS, TimingReplicates, pool
from zerogate.analysis.loss_trend import loss_spikes
from zerogate.analysis.measures import (
    loss_series,
    micro_step_time,
    overflow_skips,
    peak_memory_per_rank,
    step_time,
    timed_steps,
    tokens_per_second,
)
from zerogate.analysis.parse import event_table
from zerogate.analysis.rank_balance import rank_balance
from zerogate.config.judging import IntervalSettings
from zerogate.config.training import StabiliserSettings
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.summary import IntervalRule, RunStatistics, RunSummary, SpikeRule


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
    the variant table show. Each value is one of zerogate.analysis' definitions; None where the records do
    not hold it (``overflow_skipped_steps`` without a loss scaler, the completion without the run's
    metadata). With ``interval_rule``, the timing statistics' intervals (zerogate.analysis.intervals)."""
    timing = None if interval_rule is None else timing_replicates([steps], warmup_steps, interval_rule)
    return statistics_with(steps, warmup_steps, spike_rule, completion, timing)


def statistics_with(
    steps: pd.DataFrame,
    warmup_steps: int,
    spike_rule: SpikeRule,
    completion: Completion | None,
    timing: TimingReplicates | None,
) -> RunStatistics:
    """run_statistics with the run's bootstrap already drawn (``timing``: its intervals, None for none)."""
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
        intervals=None if timing is None else timing.intervals(),
    )


def summarise_run(
    steps: pd.DataFrame,
    warmup_steps: int,
    spike_rule: SpikeRule,
    run_meta: RunMeta | None = None,
    interval_rule: IntervalRule | None = None,
) -> RunStatistics | None:
    """The run's statistics (run_statistics) with its completion from parse_logs' metadata when given;
    None for a run that recorded no step."""
    if not len(steps):
        return None
    return run_statistics(
        steps, warmup_steps, spike_rule, completion_of(run_meta) if run_meta else None, interval_rule
    )


@dataclass(frozen=True)
class RepeatedRun:
    """A run trained ``repeats`` times: the pooled statistics, each repeat's own (the first is the run whose
    records the figures and the other gates read) and the pooled statistics' bootstrap (the time gates'
    intervals and ``compare``'s ratios are read from it; None when some repeat has none)."""

    pooled: RunStatistics | None
    each: list[RunStatistics | None]
    timing: TimingReplicates | None = None


def summarise_repeats(
    tables: list[pd.DataFrame],
    warmup_steps: int,
    spike_rule: SpikeRule,
    completions: list[Completion | None],
    interval_rule: IntervalRule,
) -> RepeatedRun:
    """The statistics of a run's repeats (``tables``: each repeat's steps, the first run first;
    ``completions``: theirs, None where not known) and their pooling: each timing statistic pooled by
    ``pooling_rule`` with the interval over all repeats; the peak memory per rank the largest over the
    repeats (a peak); complete only when every repeat is; failed ranks the most of any repeat; every other
    field is the first repeat's. One table: that run's statistics."""
    known = [*completions, *[None] * (len(tables) - len(completions))]  # a repeat without metadata: none
    drawn = [
        timing_replicates([table], warmup_steps, interval_rule) if len(table) else None for table in tables
    ]
    each = [
        statistics_with(table, warmup_steps, spike_rule, completion, timing) if len(table) else None
        for table, completion, timing in zip(tables, known, drawn)
    ]
    first = each[0]
    if len(tables) == 1:
        return RepeatedRun(first, each, drawn[0])
    if first is None or any(stats is None for stats in each):
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
    statistics = RunStatistics.model_validate({**first.model_dump(by_alias=False), **pooled})
    return RepeatedRun(statistics, each, found)


def peak_memory_spread(each: list[RunStatistics | None]) -> dict[int, float | None]:
    """Per rank, how far the repeats' peak memory spreads: the largest repeat's peak less the smallest's
    (None for a rank no repeat measured)."""
    ranks = sorted({rank for stats in each if stats for rank in stats.peak_memory_per_rank_gib})
    spread: dict[int, float | None] = {}
    for rank in ranks:
        values = [stats.peak_memory_per_rank_gib.get(rank) for stats in each if stats]
        values = [v for v in values if v is not None]
        spread[rank] = (max(values) - min(values)) if values else None
    return spread


def deepspeed_timer_medians(events: pd.DataFrame | None) -> dict[str, float]:
    """DeepSpeed's own wall-clock breakdown (rank 0), median per timer, when the run logged it."""
    timers = None if events is None else event_table(events, "wall_clock")
    if timers is None or not len(timers):
        return {}
    numbers = timers.drop(columns=["rank", "step", "line"], errors="ignore")
    return {
        f"{name} (ms, median of {int(col.notna().sum())})": float(col.median())
        for name, col in numbers.items()
        if col.notna().any()
    }


@dataclass(frozen=True)
class AnalysisSettings:
    """The settings the statistics depend on: the warm-up left out of timing and the intervals (the summary
    rules' params) and the spike rule (the run's ``stabiliser`` settings, train/settings.json)."""

    warmup_steps: int
    spike_rule: SpikeRule
    interval_rule: IntervalRule | None = None

    @classmethod
    def of(
        cls, warmup_steps: int, intervals: IntervalSettings, stabiliser: StabiliserSettings
    ) -> AnalysisSettings:
        """From the profile's ``training.warmup_steps_excluded`` and ``intervals`` and the run's
        ``stabiliser`` settings."""
        return cls(
            int(warmup_steps), SpikeRule.from_settings(stabiliser), IntervalRule.from_settings(intervals)
        )


@dataclass(frozen=True)
class RunRecords:
    """A run's records as the summary reads them: each repeat's steps table and completion (repeat 0, the
    run itself, first; a completion None where not known), what the records are counted against (the run
    spec's world size and optimizer steps), the finished run's world size (parse_logs' metadata: what the
    rank balance counts the ranks against; None when the run did not finish) and its parsed events."""

    tables: list[pd.DataFrame]
    completions: list[Completion | None]
    world_size: int | None = None
    expected_steps: int | None = None
    finished_world_size: int | None = None
    events: pd.DataFrame | None = None


def summarise(records: RunRecords, settings: AnalysisSettings) -> RunSummary:
    """The run's summary: every statistic the gates, the report, the figures, the registry, the variants'
    table and ``compare`` show, each computed here once (zerogate.contracts.summary names the function
    behind each field). Without interval settings a run trained once gets no intervals; repeats are pooled
    under the default settings then, as the registry always pooled them."""
    steps, warmup, rule = records.tables[0], settings.warmup_steps, settings.interval_rule
    if rule is None and len(records.tables) == 1:
        completion = records.completions[0] if records.completions else None
        alone = run_statistics(steps, warmup, settings.spike_rule, completion) if len(steps) else None
        repeated = RepeatedRun(alone, [alone])
    else:
        repeated = summarise_repeats(
            records.tables, warmup, settings.spike_rule, records.completions, rule or IntervalRule()
        )
    return RunSummary(
        warmup_steps_excluded=warmup,
        spike_rule=settings.spike_rule,
        interval_rule=rule,
        statistics=repeated.pooled,
        repeats=repeated.each,
        peak_memory_spread_gib=peak_memory_spread(repeated.each),
        records=[
            record_completeness(table, records.world_size, records.expected_steps).counts()
            for table in records.tables
        ],
        loss_spikes=loss_spikes(steps, settings.spike_rule),
        rank_balance=rank_balance(steps, warmup, records.finished_world_size),
        deepspeed_timers=deepspeed_timer_medians(records.events),
        timing=None if repeated.timing is None else repeated.timing.draws(),
    )
