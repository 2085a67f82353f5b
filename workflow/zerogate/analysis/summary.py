"""The run's statistics as the report, the registry, ``compare`` and the variants' table show them: each
value one of the definitions of zerogate.analysis.measures, health, loss_trend and rank_balance, the timing
statistics with their intervals (zerogate.analysis.intervals), the repeats pooled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from zerogate.analysis.bootstrap import timing_intervals, timing_replicates
from zerogate.analysis.columns import MICRO_STEP_TIME, STEP_TIME, TOKENS_PER_S
from zerogate.analysis.health import Completion, completion_of
from zerogate.analysis.intervals import TIMING_STATISTICS, IntervalRule, pool
from zerogate.analysis.loss_trend import SpikeRule, loss_spikes
from zerogate.analysis.measures import (
    loss_series,
    micro_step_time,
    overflow_skips,
    peak_memory_per_rank,
    step_time,
    timed_steps,
    tokens_per_second,
)
from zerogate.analysis.rank_balance import rank_balance
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.report import RunStatistics


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
