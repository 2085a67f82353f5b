"""Intervals on the timing statistics: a seeded stationary block bootstrap (arch) over each run's timed steps,
the repeats pooled, and the time gates' three-way verdict on synthetic runs whose truth is known."""

import numpy as np
import pytest
from arch.bootstrap import IIDBootstrap, StationaryBootstrap

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import (
    judged_gate,
    judged_run,
    no_events,
    render_profile,
    settings,
    synthetic_steps,
    train_summary,
)
from zerogate.analysis import measures
from zerogate.analysis.bootstrap import MIN_TIMED_STEPS, timing_intervals, timing_replicates, timing_sample
from zerogate.analysis.columns import MICRO_STEP_TIME
from zerogate.analysis.gates import inconclusive_gates, interval_outcome, timed_statistic
from zerogate.analysis.intervals import pool, pooling_rule
from zerogate.analysis.parse import run_metadata
from zerogate.analysis.summary import run_statistics, summarise_repeats
from zerogate.config.judging import IntervalSettings
from zerogate.contracts.intervals import Interval
from zerogate.contracts.summary import IntervalRule, SpikeRule
from zerogate.contracts.verdicts import CANNOT_JUDGE, FAIL, INCONCLUSIVE, PASS, claim_from_gate
from zerogate.errors import InputError

PROFILE = settings("cpu-tiny")
RULE = IntervalRule.from_settings(IntervalSettings())
SPIKES = SpikeRule.from_settings(PROFILE.stabiliser)
WARMUP = 5


def gate(name, **changes):
    found = next(g for g in PROFILE.gates if g.name == name)
    return found.model_copy(update=changes)


def judge(the_gate, steps, *repeats, rule=RULE):
    return judged_gate(
        the_gate,
        steps,
        no_events(),
        train_summary(),
        CPU_FINGERPRINT,
        WARMUP,
        200,
        SPIKES,
        world_size=2,
        interval_rule=rule,
        repeat_steps=list(repeats),
    )


def test_the_bootstraps_values_are_the_run_statistics():
    """One definition: the statistics the bootstrap resamples are run_statistics' own, to the last bit."""
    steps = synthetic_steps(time_noise=0.1, time_correlation=0.5)
    stats = run_statistics(steps, WARMUP, SPIKES)
    found = timing_replicates([steps], WARMUP, RULE)
    assert list(found.values) == [
        stats.step_time_median_s,
        stats.step_time_p90_s,
        stats.micro_step_time_median_s,
        stats.tokens_per_s,
    ]


def test_a_single_runs_interval_is_arch_s_percentile_interval():
    """The interval is arch's stationary-bootstrap percentile interval on the run's timed steps (every rank's
    value of a step kept together), with the seed the rule states."""
    steps = synthetic_steps(time_noise=0.1, time_correlation=0.7)
    sample = timing_sample(steps, WARMUP)
    ours = timing_intervals([steps], WARMUP, RULE)
    bootstrap = StationaryBootstrap(
        sample.block_length, sample.data, seed=np.random.default_rng([RULE.seed, 0])
    )
    low, high = bootstrap.conf_int(
        sample.values, reps=RULE.resamples, method="percentile", size=RULE.confidence
    )
    assert ours.step_time_median_s == Interval(low=low[0], high=high[0])
    assert ours.tokens_per_s == Interval(low=low[3], high=high[3])
    assert sample.data.shape == (200 - WARMUP, 2 + 2 + 2 + 1)  # step, micro-step per rank; tokens/s summed
    assert ours.repeats == 1 and "run-to-run" not in ours.covers.split(";")[0]


def test_intervals_are_seeded_and_reproducible():
    steps = synthetic_steps(time_noise=0.1)
    first = timing_intervals([steps], WARMUP, RULE)
    assert timing_intervals([steps], WARMUP, RULE) == first
    other = timing_intervals([steps], WARMUP, RULE.model_copy(update={"seed": 1}))
    assert other.step_time_median_s != first.step_time_median_s


def test_correlated_steps_widen_the_interval_as_an_iid_bootstrap_would_not():
    """Consecutive steps alike (AR(1), correlation 0.9): the block bootstrap's interval is wider than an IID
    bootstrap's on the same steps, whose independence assumption understates the median's uncertainty."""
    steps = synthetic_steps(steps=400, time_noise=0.1, time_correlation=0.9)
    sample = timing_sample(steps, WARMUP)
    assert sample.block_length > 5  # the estimate sees the correlation
    block = timing_intervals([steps], WARMUP, RULE).step_time_median_s
    iid = IIDBootstrap(sample.data, seed=np.random.default_rng(0))
    low, high = iid.conf_int(sample.values, reps=RULE.resamples, method="percentile")
    assert block.high - block.low > 1.5 * (high[0] - low[0])
    plain = timing_sample(synthetic_steps(steps=400, time_noise=0.1), WARMUP)
    assert plain.block_length < sample.block_length


def test_too_few_timed_steps_give_no_interval_and_a_gap_gives_none_for_its_statistic():
    assert timing_intervals([synthetic_steps(steps=MIN_TIMED_STEPS + WARMUP - 1)], WARMUP, RULE) is None
    steps = synthetic_steps()
    steps.loc[steps.index[7], MICRO_STEP_TIME] = np.nan
    found = timing_intervals([steps], WARMUP, RULE)
    assert found.micro_step_time_median_s is None and found.step_time_median_s is not None


def test_pooling_drops_the_fastest_and_slowest_from_three_repeats_on():
    assert pool(np.array([5.0])) == 5.0
    assert pool(np.array([1.0, 3.0])) == 2.0
    assert pool(np.array([9.0, 1.0, 2.0])) == 2.0
    assert pool(np.array([1.0, 2.0, 4.0, 10.0])) == 3.0
    assert "MLPerf" in pooling_rule(3) and "nothing dropped" in pooling_rule(2)


def test_repeats_cover_the_run_to_run_variation_one_run_cannot_see():
    """Three runs whose levels differ (0.50, 0.55, 0.60 s) with little noise inside each: one run's interval
    is narrow around its own level and misses the others; the repeats' pooled interval spans the spread."""
    runs = [
        synthetic_steps(step_time=level, time_noise=0.01, seed=index)
        for index, level in enumerate((0.50, 0.55, 0.60))
    ]
    one = timing_intervals(runs[:1], WARMUP, RULE).step_time_median_s
    assert not one.contains(0.55)
    pooled = summarise_repeats(runs, WARMUP, SPIKES, [None] * 3, RULE)
    assert pooled.pooled.repeats == 3 and pooled.pooled.intervals.repeats == 3
    assert pooled.pooled.step_time_median_s == pytest.approx(0.55, rel=0.01)  # the middle repeat
    interval = pooled.pooled.intervals.step_time_median_s
    assert interval.low < 0.52 and interval.high > 0.58
    assert [stats.step_time_median_s for stats in pooled.each] == [
        measures.step_time(run, WARMUP).value for run in runs
    ]
    assert "run-to-run" in pooled.pooled.intervals.covers


def test_memory_per_repeat_is_kept_and_the_pooled_peak_is_the_largest():
    runs = [synthetic_steps(memory_gib=m, seed=i) for i, m in enumerate((0.60, 0.62))]
    pooled = summarise_repeats(runs, WARMUP, SPIKES, [None, None], RULE)
    assert [s.peak_memory_per_rank_gib[0] for s in pooled.each] == pytest.approx([0.60, 0.62])
    assert pooled.pooled.peak_memory_per_rank_gib[0] == pytest.approx(0.62)


@pytest.mark.parametrize(
    "comparison, threshold, expected",
    [
        ("<=", 2.0, PASS),
        ("<=", 1.5, PASS),
        ("<=", 1.2, INCONCLUSIVE),
        ("<=", 0.9, FAIL),
        ("<", 1.5, INCONCLUSIVE),
        ("<", 1.6, PASS),
        (">=", 1.0, PASS),
        (">=", 1.2, INCONCLUSIVE),
        (">", 1.5, FAIL),
        (">", 0.99, PASS),
        ("==", 1.2, INCONCLUSIVE),
        ("==", 3.0, FAIL),
    ],
)
def test_the_interval_decides_the_outcome(comparison, threshold, expected):
    assert interval_outcome(comparison, threshold, Interval(low=1.0, high=1.5)) == expected


# Synthetic runs whose truth is known: a 0.5 s step, consecutive steps correlated, 10 % noise.
TRUTH = dict(step_time=0.5, time_noise=0.1, time_correlation=0.5)


@pytest.mark.parametrize("threshold, expected", [(0.6, PASS), (0.4, FAIL)])
def test_a_time_gate_clearly_under_or_over_its_threshold_passes_or_fails(threshold, expected):
    judged = judge(gate("optimizer_step_time", threshold=threshold), synthetic_steps(**TRUTH))
    assert judged.verdict == expected
    assert judged.interval.unit == "s" and judged.interval.confidence == 0.95 and judged.interval.repeats == 1
    assert judged.interval.low < judged.measured < judged.interval.high
    if expected == FAIL:
        assert "lies wholly outside" in judged.reason


def test_a_time_gate_whose_interval_straddles_its_threshold_is_inconclusive():
    steps = synthetic_steps(**TRUTH)
    measured = measures.step_time(steps, WARMUP).value
    judged = judge(gate("optimizer_step_time", threshold=measured), steps)
    assert judged.verdict == INCONCLUSIVE
    assert "straddles <= " in judged.reason and judged.interval.contains(measured)
    # The point value alone would have passed: the interval is what makes it inconclusive.
    assert judge(gate("optimizer_step_time", threshold=measured), steps, rule=None).verdict == PASS


def test_the_p90_and_micro_step_gates_judge_their_own_intervals():
    steps = synthetic_steps(**TRUTH)
    p90 = judge(gate("optimizer_step_time_p90"), steps)
    micro = judge(gate("micro_step_time"), steps)
    found = timing_intervals([steps], WARMUP, RULE)
    assert (p90.interval.low, p90.interval.high) == (found.step_time_p90_s.low, found.step_time_p90_s.high)
    assert (micro.interval.low, micro.interval.high) == (
        found.micro_step_time_median_s.low,
        found.micro_step_time_median_s.high,
    )
    assert timed_statistic(gate("peak_memory_smallest_device")) is None
    assert judge(gate("peak_memory_smallest_device"), steps).interval is None  # memory: no interval


def test_a_gate_pools_its_repeats():
    runs = [
        synthetic_steps(step_time=level, time_noise=0.01, seed=index)
        for index, level in enumerate((0.5, 0.55, 0.6))
    ]
    judged = judge(gate("optimizer_step_time", threshold=0.57), *runs)
    assert judged.measured == pytest.approx(0.55, rel=0.01) and judged.interval.repeats == 3
    assert judged.verdict == INCONCLUSIVE  # the third repeat's 0.6 s is within the pooled interval
    assert judged.evidence.per_repeat == pytest.approx([measures.step_time(r, WARMUP).value for r in runs])
    alone = judge(gate("optimizer_step_time", threshold=0.57), runs[0])
    assert alone.verdict == PASS  # one run of 0.5 s cannot see that another gives 0.6 s


def test_an_incomplete_repeat_leaves_the_time_gates_not_measured():
    runs = [synthetic_steps(seed=0), synthetic_steps(seed=1)]
    runs[1] = runs[1][runs[1]["step"] != 50]
    judged = judge(gate("optimizer_step_time"), *runs)
    assert judged.verdict == "NOT MEASURED" and "repeat 1:" in judged.reason


def test_evaluate_counts_inconclusive_apart_and_strict_lists_it():
    steps = synthetic_steps(**TRUTH)
    measured = measures.step_time(steps, WARMUP).value
    rendered = render_profile(PROFILE, CPU_FINGERPRINT, steps=200)
    gates = (gate("optimizer_step_time", threshold=measured), gate("micro_step_time"))
    result = judged_run(
        gates,
        steps,
        no_events(),
        train_summary(),
        rendered.run_spec,
        rendered.deviations,
        CPU_FINGERPRINT,
        WARMUP,
        SPIKES,
        run_meta=run_metadata(steps, no_events(), train_summary(), "", 200),
        interval_rule=RULE,
    )
    assert result.counts[INCONCLUSIVE] == 1 and result.counts[PASS] == 1 and result.counts[FAIL] == 0
    assert [line.split(":")[0] for line in inconclusive_gates(result)] == ["optimizer_step_time"]


def test_an_inconclusive_gate_cannot_judge_its_claim():
    verdict = claim_from_gate(INCONCLUSIVE, "measured 0.5 s", "gate optimizer_step_time", faithful=True)
    assert verdict.verdict == CANNOT_JUDGE and verdict.text.startswith(
        "cannot be judged here (the measured interval"
    )


def test_interval_settings_name_the_bad_key():
    with pytest.raises(InputError, match="intervals.confidence"):
        settings({**_profile(), "intervals": {"confidence": 1.5}})
    with pytest.raises(InputError, match="intervals.resamples"):
        settings({**_profile(), "intervals": {"resamples": 10}})
    with pytest.raises(InputError, match="repeats: 0 is not a whole number"):
        settings({**_profile(), "repeats": 0})
    typed = settings({**_profile(), "repeats": 3, "intervals": {"confidence": 0.9}})
    assert typed.repeats == 3 and typed.intervals == IntervalSettings(confidence=0.9)
    assert settings(_profile()).repeats == 1


def _profile():
    from tests.unit.helpers import REPO
    from zerogate.config.profile import load_profile_chain, resolve_profile

    return resolve_profile(
        load_profile_chain(REPO / "config/profiles", "smoke", "config/config.yaml", "profile")
    )
