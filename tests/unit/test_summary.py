"""The run's summary (zerogate.analysis.summary.summarise, rule summarise_run): every statistic computed once,
kept exactly through its file, and what the judging rules read of a run loaded once
(zerogate.analysis.evidence)."""

import dataclasses
import json

import numpy as np
import pytest

from tests.unit.helpers import no_events, run_spec_for, summarised, synthetic_steps, train_summary
from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.evidence import READERS, RunEvidence, load_evidence
from zerogate.analysis.health import record_completeness
from zerogate.analysis.intervals import TimingReplicates
from zerogate.analysis.loss_trend import loss_spikes
from zerogate.analysis.parse import run_metadata
from zerogate.analysis.rank_balance import rank_balance
from zerogate.analysis.summary import run_statistics
from zerogate.contracts.base import ContractError
from zerogate.contracts.summary import IntervalRule, RunSummary, SpikeRule

WARMUP = 5
RULE = SpikeRule(window=16, threshold=6.0, min_history=5)
INTERVALS = IntervalRule(resamples=200)


def noisy(seed: int):
    return synthetic_steps(steps=60, step_time=0.5, time_noise=0.1, time_correlation=0.5, seed=seed)


def test_the_summary_holds_each_statistic_as_its_one_function_computes_it():
    steps = noisy(1)
    meta = run_metadata(steps, no_events(), train_summary(60), "", 60)
    spec = run_spec_for(60)
    summary = summarised(steps, WARMUP, RULE, run_spec=spec, run_meta=meta, interval_rule=INTERVALS)
    assert summary.warmup_steps_excluded == WARMUP and summary.spike_rule == RULE
    assert summary.interval_rule == INTERVALS
    alone = run_statistics(steps, WARMUP, RULE, interval_rule=INTERVALS)
    assert summary.statistics.step_time_median_s == alone.step_time_median_s
    assert summary.statistics.intervals == alone.intervals and summary.repeats == [summary.statistics]
    assert summary.loss_spikes == loss_spikes(steps, RULE)
    assert summary.rank_balance == rank_balance(steps, WARMUP, meta.world_size)
    assert summary.records == [record_completeness(steps, spec.world_size, 60).counts()]


def test_the_bootstrap_is_kept_to_the_last_bit():
    """The replicates the time gates and compare read back from summary/run.json are the bootstrap's own."""
    tables = [noisy(1), noisy(2), noisy(3)]
    summary = summarised(tables[0], WARMUP, RULE, interval_rule=INTERVALS, repeat_steps=tables[1:])
    drawn = timing_replicates(tables, WARMUP, INTERVALS)
    read = TimingReplicates.of_summary(summary)
    for name in ("values", "replicates", "per_repeat"):
        assert np.array_equal(getattr(read, name), getattr(drawn, name), equal_nan=True), name
    assert read.block_lengths == drawn.block_lengths and read.rule == INTERVALS
    assert read.intervals() == drawn.intervals() == summary.statistics.intervals
    assert len(summary.repeats) == 3 and summary.statistics.repeats == 3


def test_without_interval_settings_a_single_run_has_no_bootstrap():
    summary = summarised(noisy(1), WARMUP, RULE)
    assert summary.interval_rule is None and summary.timing is None
    assert summary.statistics.intervals is None and TimingReplicates.of_summary(summary) is None


def test_a_run_that_recorded_no_step_has_no_statistics():
    steps = noisy(1).iloc[0:0]
    summary = summarised(steps, WARMUP, RULE, interval_rule=INTERVALS)
    assert summary.statistics is None and summary.repeats == [None] and summary.timing is None
    assert summary.loss_spikes.count == 0 and not summary.rank_balance.measured


def test_the_summary_file_reads_back_equal(tmp_path):
    summary = summarised(noisy(1), WARMUP, RULE, interval_rule=INTERVALS)
    path = summary.write(tmp_path / "summary/run.json")
    assert RunSummary.read(path) == summary
    assert json.loads(path.read_text())["contract"] == RunSummary.stamp()


def test_evidence_is_read_once_by_the_name_of_each_input(tmp_path):
    assert set(READERS) == {field.name for field in dataclasses.fields(RunEvidence)}
    summary = summarised(noisy(1), WARMUP, RULE).write(tmp_path / "run.json")
    spec = run_spec_for(60).write(tmp_path / "run_spec.json")
    run = load_evidence(
        {"run_summary": str(summary), "run_spec": str(spec), "variants": [], "loss": str(tmp_path / "x.png")}
    )
    assert run.run_summary == RunSummary.read(summary) and run.run_spec.world_size == 2
    assert run.variants is None and run.steps is None  # an empty list input, an input the rule lacks
    with pytest.raises(ContractError, match=r"run_spec\.json: contract: a run_spec file, not run_summary"):
        load_evidence({"run_summary": str(spec)})


def test_the_repeats_peak_memory_spread_is_the_largest_less_the_smallest():
    runs = [synthetic_steps(steps=30, memory_gib=gib) for gib in (0.60, 0.64, 0.62)]
    summary = summarised(runs[0], WARMUP, RULE, interval_rule=INTERVALS, repeat_steps=runs[1:])
    peaks = [stats.peak_memory_per_rank_gib for stats in summary.repeats]
    assert summary.peak_memory_spread_gib == {
        rank: pytest.approx(max(p[rank] for p in peaks) - min(p[rank] for p in peaks)) for rank in (0, 1)
    }
    assert summary.peak_memory_spread_gib[0] == pytest.approx(0.04)
