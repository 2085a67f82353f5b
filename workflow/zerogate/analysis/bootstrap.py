"""The stationary block bootstrap of the timing statistics (see zerogate.analysis.intervals): each run's
timed steps resampled in blocks, every rank's value of a step kept together, the repeats resampled as
independent runs; the replicates the intervals are read from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from arch.bootstrap import StationaryBootstrap, optimal_block_length

from zerogate.analysis.columns import STEP_TIME
from zerogate.analysis.intervals import TIMING_STATISTICS, TimingReplicates, pool
from zerogate.analysis.measures import ARRAY_STATISTICS, timed_steps
from zerogate.contracts.intervals import TimingIntervals
from zerogate.contracts.summary import IntervalRule

# Fewer timed steps than this give no interval: the block-length estimate and the bootstrap's tails need
# several blocks' worth of steps.
MIN_TIMED_STEPS = 20


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

    estimate = optimal_block_length(np.column_stack(finite))["stationary"].max()
    block = float(min(max(1.0, estimate if np.isfinite(estimate) else 1.0), len(index) / 2))
    return TimingSample(index, data, columns, block)


def _replicates(sample: TimingSample, rule: IntervalRule, repeat: int) -> np.ndarray:
    """``rule.resamples`` stationary-bootstrap replicates of the sample's timing statistics (resamples x
    statistics), seeded by the rule's seed and the repeat's number."""

    bootstrap = StationaryBootstrap(
        sample.block_length, sample.data, seed=np.random.default_rng([rule.seed, repeat])
    )
    return np.asarray(bootstrap.apply(sample.values, reps=rule.resamples), dtype=float).reshape(
        rule.resamples, -1
    )


def timing_replicates(
    tables: list[pd.DataFrame], warmup_steps: int, rule: IntervalRule
) -> TimingReplicates | None:
    """The timing statistics of the repeats ``tables`` (each one repeat's steps table), pooled, with their
    bootstrap replicates (zerogate.analysis.intervals); None when some repeat has too few timed
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
