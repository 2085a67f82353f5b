"""The judging code's evidence and messages, exactly, on small hand-made runs whose right answers are worked
out by hand in each test (issue 14: the mutation score of zerogate.analysis.{gates,measures,parse}).

Evidence keys carry units and are the product's user-visible contract, so the whole evidence dicts are
asserted; the boundary cases sit exactly at the thresholds the definitions name."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import no_events, spike_rule, synthetic_steps
from zerogate.analysis import gates, measures
from zerogate.analysis.measures import COLLECTIVES_TIME, STEP_TIME, Convergence, ConvergenceRule, SpikeRule
from zerogate.analysis.parse import parse_launcher_log, parse_run, read_rank_metrics, run_metadata, stabiliser_events

RULE = SpikeRule(window=16, threshold=6.0, min_history=5)


def timed_run(rows: dict[int, list[tuple[float, float]]], device: str = "cpu") -> pd.DataFrame:
    """Records from {rank: [(step_time(s), collectives(s)) per step 1, 2, ...]}."""
    return pd.DataFrame([{"rank": rank, "step": step, STEP_TIME: t, COLLECTIVES_TIME: c, "device": device}
                         for rank, series in rows.items() for step, (t, c) in enumerate(series, start=1)])


# ---- who waits for whom: measures.rank_balance, its evidence and its problems ------------------------

# Step 1 is the warm-up (wild values, left out). Steps 2 and 3, both ranks finishing together:
#   step 2: T = 1.0; compute 0.5 (rank 0), 0.75 (rank 1) -> collectives 0.5, 0.25; communication 0.25;
#           wait 0.25 (rank 0), 0 (rank 1)
#   step 3: T = 2.0; compute 0.5, 1.25 -> collectives 1.5, 0.75; communication 0.75; wait 0.75, 0
STRAGGLING = {0: [(9.0, 8.0), (1.0, 0.5), (2.0, 1.5)], 1: [(9.0, 1.0), (1.0, 0.25), (2.0, 0.75)]}


def test_rank_balance_evidence_by_hand():
    balance = measures.rank_balance(timed_run(STRAGGLING), 1, world_size=2)
    assert balance.evidence() == {
        "ranks(rank)": [0, 1], "timed_steps(steps)": 2,
        "compute_median(s)": {0: 0.5, 1: (0.75 + 1.25) / 2},
        "wait_median(s)": {0: (0.25 + 0.75) / 2, 1: 0.0},
        "wait_total(s)": {0: 0.25 + 0.75, 1: 0.0},
        "wait_share(ratio)": {0: (0.25 + 0.75) / (1.0 + 2.0), 1: 0.0},
        "step_time_median(s)": {0: 1.5, 1: 1.5},
        "communication_median(s)": (0.25 + 0.75) / 2,
        "slowest_rank": 1, "straggler_rank": 1, "next_slowest_rank": 0,
        "compute_excess(s)": 1.0 - 0.5, "compute_excess(ratio)": (1.0 - 0.5) / 0.5,
        "straggler_margin(ratio of step time)": 0.10, "problems": []}
    assert balance.pace == 1.5  # the slowest rank's median step time: the margin's base (0.15 s < 0.5 s)


def test_rank_balance_names_rank_0_when_it_is_the_straggler():
    swapped = {0: STRAGGLING[1], 1: STRAGGLING[0]}
    balance = measures.rank_balance(timed_run(swapped), 1, world_size=2)
    assert (balance.slowest, balance.straggler, balance.next_slowest) == (0, 0, 1)
    assert balance.compute == {0: 1.0, 1: 0.5} and balance.wait == {0: 0.0, 1: 0.5}


def test_a_difference_of_exactly_the_margin_names_no_straggler():
    # Both steps: T = 10 s; compute 2 s (rank 0) and 3 s (rank 1). Excess 1 s = 0.10 x 10 s: not more.
    exact = measures.rank_balance(timed_run({0: [(10.0, 8.0)] * 3, 1: [(10.0, 7.0)] * 3}), 1, world_size=2)
    assert exact.excess == 1.0 and exact.pace == 10.0 and 0.10 * 10.0 == 1.0
    assert exact.slowest == 1 and exact.straggler is None and exact.waiting_for_straggler == {}
    # Noise, not a straggler: the summary reports no excess either.
    assert exact.summary() == {"straggler_rank": None, "straggler_compute_excess(s)": None,
                               "wait_for_straggler_median(s)": None}
    beyond = measures.rank_balance(timed_run({0: [(10.0, 7.75)] * 3, 1: [(10.0, 6.5)] * 3}), 1, world_size=2)
    assert beyond.excess == 3.5 - 2.25 and beyond.straggler == 1


def test_a_next_slowest_rank_with_no_compute_gives_an_infinite_excess_ratio():
    # Rank 0 spent its whole step in collectives (compute 0): the excess over it is no finite share of it.
    balance = measures.rank_balance(timed_run({0: [(1.0, 1.0)] * 2, 1: [(1.0, 0.5)] * 2}), 0, world_size=2)
    assert balance.compute == {0: 0.0, 1: 0.5} and balance.next_slowest == 0
    assert balance.excess == 0.5 and balance.excess_ratio == math.inf


def test_wait_share_of_a_rank_with_sub_second_or_no_step_time():
    # One step: rank 0's record says 0 s (and 0.5 s in collectives), rank 1's 0.5 s with 0.25 s in them.
    # communication 0.25; wait 0.25 (rank 0), 0 (rank 1); rank 0's share has no base: NaN, never inf.
    balance = measures.rank_balance(timed_run({0: [(0.0, 0.5)], 1: [(0.5, 0.25)]}), 0, world_size=2)
    assert balance.wait_total == {0: 0.25, 1: 0.0}
    assert math.isnan(balance.wait_share[0]) and balance.wait_share[1] == 0.0 / 0.5


def test_rank_balance_not_measured_keeps_its_ranks_and_counts_and_says_why():
    run = timed_run(STRAGGLING)
    balance = measures.rank_balance(run[run["rank"] == 0], 1, world_size=2)
    assert balance.evidence() == {
        "ranks(rank)": [0], "timed_steps(steps)": 2, "compute_median(s)": {}, "wait_median(s)": {},
        "wait_total(s)": {}, "wait_share(ratio)": {}, "step_time_median(s)": {}, "communication_median(s)": None,
        "slowest_rank": None, "straggler_rank": None, "next_slowest_rank": None, "compute_excess(s)": None,
        "compute_excess(ratio)": None, "straggler_margin(ratio of step time)": 0.10,
        "problems": ["ranks with no timed step records: [1] of world size 2"]}
    assert balance.pace is None and not balance.measured


def test_a_run_within_its_warmup_has_no_timed_step_to_balance():
    balance = measures.rank_balance(timed_run(STRAGGLING), 3, world_size=2)
    assert balance.ranks == [] and balance.timed_steps == 0
    assert balance.problems == ["ranks with no timed step records: [0, 1] of world size 2",
                                "no timed step (the run stopped within its warm-up)"]
    one = measures.rank_balance(timed_run({0: [(1.0, 0.5)] * 2}), 2)
    assert one.problems == ["a single rank waits for no other", "no timed step (the run stopped within its warm-up)"]


def test_rank_time_problems_exactly():
    run = timed_run(STRAGGLING)
    old = measures.rank_balance(run.drop(columns=[COLLECTIVES_TIME]), 1, 2)
    assert old.problems == ["the step records hold no collectives(s) (zerogate.train.metrics records it; a run with "
                            "the metrics layer off, or from before it, has none)"]
    empty = measures.rank_balance(run.assign(**{COLLECTIVES_TIME: None}), 1, 2)
    assert empty.problems == old.problems
    mixed = run.assign(device=["cpu", "cuda:1", "cuda:0", "cpu", None, "cuda:1"])
    assert measures.rank_balance(mixed, 1, 2).problems == [
        "collectives(s) is host time, and on cuda:0 NCCL returns once a collective is queued: "
        "the device's wait is not measured"]
    # Without a device column the host time is taken as CPU time.
    assert measures.rank_balance(run.drop(columns=["device"]), 1, 2).problems == []


def test_rank_time_problems_name_each_ranks_missing_steps_and_gaps():
    run = timed_run({0: [(1.0, 0.5)] * 12, 1: [(1.0, 0.25)] * 12, 2: [(1.0, 0.25)] * 12})
    run = run[~((run["rank"] == 2) & (run["step"].isin([3, 4])))]
    run.loc[(run["rank"] == 1) & (run["step"] == 5), STEP_TIME] = np.nan
    run.loc[(run["rank"] == 0) & (run["step"] > 2), COLLECTIVES_TIME] = np.inf
    balance = measures.rank_balance(run, 0, world_size=3)
    assert balance.problems == [
        "rank 2: 2 timed steps missing (3, 4)",
        "rank 1: step_time(s) missing or non-finite at 1 steps (5)",
        "rank 0: collectives(s) missing or non-finite at 10 steps (3, 4, 5, 6, 7, 8, 9, 10 and 2 more)"]
    assert balance.ranks == [0, 1, 2] and balance.timed_steps == 12


def test_rank_times_table_columns_and_types():
    run = timed_run(STRAGGLING).astype({"rank": float, "step": float})  # as a table with gaps holds them
    frame = measures.rank_times(run, 1)
    assert list(frame.columns) == ["rank", "step", STEP_TIME, COLLECTIVES_TIME, measures.COMMUNICATION,
                                   measures.WAIT, measures.COMPUTE]
    assert frame["rank"].dtype.kind == "i" and frame["step"].dtype.kind == "i"
    assert list(frame.index) == [0, 1, 2, 3]
    assert frame[measures.WAIT].tolist() == [0.25, 0.75, 0.0, 0.0]
    assert frame[measures.COMPUTE].tolist() == [0.5, 0.5, 0.75, 1.25]
    # Records without collective times: every derived column is NaN, the step time is kept.
    bare = measures.rank_times(timed_run(STRAGGLING).drop(columns=[COLLECTIVES_TIME]), 1)
    assert bare[STEP_TIME].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert bare[[COLLECTIVES_TIME, measures.COMMUNICATION, measures.WAIT, measures.COMPUTE]].isna().all().all()


def test_a_value_that_is_no_number_counts_as_missing():
    run = timed_run(STRAGGLING).astype({STEP_TIME: object, COLLECTIVES_TIME: object})
    run.loc[(run["rank"] == 1) & (run["step"] == 3), [STEP_TIME, COLLECTIVES_TIME]] = "n/a"
    frame = measures.rank_times(run, 1)
    assert frame[STEP_TIME].isna().sum() == 1 and frame[COLLECTIVES_TIME].isna().sum() == 1
    assert measures.missing_values(run, STEP_TIME) == {1: [3]}
    lossy = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "loss": [1.0, "n/a"]})
    assert [e.step for e in measures.nonfinite_events(lossy, ["loss"], [])] == [2]


# ---- small definitions at their boundaries -------------------------------------------------------

def test_span_shows_eight_numbers_then_how_many_more():
    assert measures._span(list(range(1, 9))) == "1, 2, 3, 4, 5, 6, 7, 8"
    assert measures._span(list(range(1, 10))) == "1, 2, 3, 4, 5, 6, 7, 8 and 1 more"


def test_overflow_skipped_count_at_the_warmup_boundary():
    run = pd.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3], "loss_scale": [1.0] * 3,
                        "skip_reason": [None, "fp16_overflow", None]})
    assert measures.overflow_skipped_count(run, 2) == 0  # the skip at step 2 is inside a 2-step warm-up
    assert measures.overflow_skipped_count(run, 1) == 1
    assert measures.after_warmup(run, 2)["step"].tolist() == [3]


def test_smooth_keeps_a_single_value():
    assert measures.smooth(pd.Series([3.0])).tolist() == [3.0]


def test_nonfinite_events_read_every_listed_metric_present():
    steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "loss": [1.0, float("nan")]})
    found = measures.nonfinite_events(steps, ["grad_norm", "loss"], [])  # grad_norm not recorded
    assert [e.evidence() for e in found] == [{"step(step)": 2, "ranks(rank)": [0], "metrics": ["loss"],
                                              "sources": ["step records"]}]


def test_completion_of_counts_the_ranks_of_the_world_size():
    meta = {"steps_completed_per_rank": {"0": 10}, "finished": True, "expected_steps": 10, "world_size": 2}
    completion = measures.completion_of(meta)
    assert completion.steps_per_rank == {0: 10, 1: 0} and completion.stopped_early == {1: 0}
    assert completion.failed_ranks == [1] and not completion.complete


def test_run_statistics_under_fp16_and_without_micro_steps_or_losses():
    frame = pd.DataFrame({"rank": [0] * 11, "step": list(range(1, 12)), "loss": [float("nan")] * 11,
                          "step_time(s)": [1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "loss_scale": [1.0] * 11,
                          "skip_reason": [None] * 10 + ["fp16_overflow"]})
    stats = measures.run_statistics(frame, 0, RULE)
    # Timed steps 1..10 (step 11 skipped): median 5.5; p90 = 9 + 0.1 x (10 - 9) by linear interpolation.
    assert stats["step_time_median(s)"] == 5.5 and stats["step_time_p90(s)"] == pytest.approx(9.1)
    assert stats["overflow_skipped_steps"] == 1 and stats["micro_step_time_median(s)"] is None
    assert stats["first_loss"] is None and stats["final_loss"] is None


# ---- loss convergence: the figures by hand, and the rule's boundaries --------------------------------

def loss_run(values):
    return pd.DataFrame({"rank": 0, "step": range(1, len(values) + 1), "loss": values})


def figures(found: Convergence):
    return (found.steps, found.nonfinite_steps, found.initial, found.final, found.lowest_block, found.final_spread,
            found.ratio, found.rebound, found.drop_sigmas)


def test_convergence_figures_one_step_blocks():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    # Rising: block 1 (4 x 0.25); initial = the first loss 1; blocks (from the end) 4, 3, 2, 1; final 4, lowest 1;
    # a one-loss final block has no spread; nothing dropped: drop 0 sigmas, rebound inf; ratio 4 / 1.
    assert figures(measures.loss_convergence(loss_run([1.0, 2.0, 3.0, 4.0]), rule)) == (
        4, [], 1.0, 4.0, 1.0, 0.0, 4.0, math.inf, 0.0)
    # Falling by less than 1: initial 1, final 0.75, lowest 0.25; spread 0 and a drop: inf sigmas;
    # rebound (0.75 - 0.25) / (1 - 0.25).
    assert figures(measures.loss_convergence(loss_run([1.0, 0.25, 0.5, 0.75]), rule)) == (
        4, [], 1.0, 0.75, 0.25, 0.0, 0.75, 0.5 / 0.75, math.inf)


def test_convergence_figures_two_step_blocks_and_a_partial_first_block():
    rule = ConvergenceRule(initial_steps=2, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    # n = 8, block 2: initial median(4, 6) = 5; blocks [1.5, 2.5] 2, [2, 2.5] 2.25, [1, 1] 1, [4, 6] 5;
    # spread: median |tail - 2| = 0.5, x 1.4826; drop 3; rebound (2 - 1) / (5 - 1); ratio 2 / 5.
    found = measures.loss_convergence(loss_run([4.0, 6.0, 1.0, 1.0, 2.0, 2.5, 1.5, 2.5]), rule)
    assert figures(found)[:6] == (8, [], 5.0, 2.0, 1.0, 0.5 * 1.4826)
    assert (found.ratio, found.rebound) == (2.0 / 5.0, 0.25)
    assert found.drop_sigmas == pytest.approx(3.0 / (0.5 * 1.4826))
    # n = 5, final_fraction 0.4: block 2; blocks from the end [2, 2] 2, [3, 3] 3, then the first loss alone: 1;
    # nothing fell below the initial loss 1, and the final block is above it: rebound inf.
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.4, max_rebound=0.5, min_drop_sigmas=3.0)
    found = measures.loss_convergence(loss_run([1.0, 3.0, 3.0, 2.0, 2.0]), rule)
    assert (found.initial, found.final, found.lowest_block, found.rebound) == (1.0, 2.0, 1.0, math.inf)


def test_convergence_without_a_positive_initial_loss_has_no_ratio():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    found = measures.loss_convergence(loss_run([0.0, 0.0, 0.0, 0.0]), rule)
    assert math.isnan(found.ratio) and found.rebound == 0.0 and found.drop_sigmas == 0.0


def test_convergence_over_a_non_finite_loss_is_nan_throughout():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    found = measures.loss_convergence(loss_run([3.0, float("inf"), 1.0, float("nan")]), rule)
    assert found.steps == 4 and found.nonfinite_steps == [2, 4]
    assert all(math.isnan(v) for v in figures(found)[2:])


def test_convergence_problems_at_the_rules_thresholds():
    rule = ConvergenceRule(initial_steps=3, final_fraction=0.1, max_rebound=0.25, min_drop_sigmas=3.0)

    def judged(sigmas, rebound):
        return Convergence(10, [], 5.0, 1.0, 1.0, 0.1, 0.2, rebound, sigmas).problems(rule)

    assert judged(3.0, 0.25) == []  # exactly at both thresholds: passes (>= 3 sigmas, <= 0.25)
    assert judged(2.99, 0.26) == [
        "the drop from the initial to the final loss is 2.99 final-block standard deviations, not >= 3",
        "the final loss is back up 0.26 of the drop to the lowest block mean (more than 0.25)"]


def convergence_gate(initial_steps=2, final_fraction=0.25):
    return {"convergence": {"initial_steps": initial_steps, "final_fraction": final_fraction, "max_rebound": 0.5,
                            "min_drop_sigmas": 3.0}}


def test_loss_convergence_gate_evidence_by_hand():
    values = [4.0, 6.0, 1.0, 1.0, 2.0, 2.5, 1.5, 2.5]  # the figures of the two-step-block test above
    ratio, problems, evidence = gates.loss_convergence(loss_run(values), convergence_gate(), RULE)
    assert ratio == 2.0 / 5.0 and problems == []
    assert evidence == {
        "steps(steps)": 8, "nonfinite_loss_steps(step)": [], "initial_loss(nats/token)": 5.0,
        "final_loss(nats/token)": 2.0, "lowest_block_mean_loss(nats/token)": 1.0,
        "final_block_spread(nats/token)": 0.5 * 1.4826, "rebound(ratio)": 0.25,
        "drop(final-block sigmas)": pytest.approx(3.0 / (0.5 * 1.4826)),
        "rule": {"initial_steps(steps)": 2, "final_fraction(ratio)": 0.25, "max_rebound(ratio)": 0.5,
                 "min_drop(final-block sigmas)": 3.0},
        "spikes(count)": 0, "spike_steps(step)": [], "spike_rule": RULE.describe()}


def test_loss_convergence_gate_evidence_of_a_non_finite_loss_is_none_not_nan():
    _, problems, evidence = gates.loss_convergence(loss_run([3.0, float("nan"), 2.0, 1.0]), convergence_gate(), RULE)
    assert problems == ["non-finite loss at 1 steps (2)"]
    assert evidence["nonfinite_loss_steps(step)"] == [2]
    assert [evidence[k] for k in ("initial_loss(nats/token)", "final_loss(nats/token)",
                                  "lowest_block_mean_loss(nats/token)", "final_block_spread(nats/token)",
                                  "rebound(ratio)", "drop(final-block sigmas)")] == [None] * 6
    assert gates._finite_or_none(None) is None and gates._finite_or_none(math.inf) is None
    assert gates._finite_or_none(np.float64(2.5)) == 2.5


def test_loss_convergence_gate_spike_steps():
    values = [3.0, 3.01, 2.99, 3.0, 3.02, 2.98, 3.0, 9.0, 3.0, 2.99, 3.01, 3.0]
    _, _, evidence = gates.loss_convergence(loss_run(values), convergence_gate(), RULE)
    assert evidence["spikes(count)"] == 1 and evidence["spike_steps(step)"] == [8]


def test_loss_convergence_needs_twice_the_initial_steps_and_at_least_two():
    ratio, _, evidence = gates.loss_convergence(loss_run([2.0, 1.0]), convergence_gate(initial_steps=1,
                                                                                       final_fraction=0.5), RULE)
    assert evidence["steps(steps)"] == 2 and ratio == 0.5
    with pytest.raises(gates.NotMeasured, match="only 1 loss values: too few to tell a trend"):
        gates.loss_convergence(loss_run([2.0]), convergence_gate(initial_steps=1), RULE)


# ---- the non-finite gate and the completion evidence -----------------------------------------------

def test_nonfinite_gate_evidence_with_a_fatal_loss_scale_abort():
    steps = synthetic_steps(steps=4)
    steps.loc[(steps["step"] == 3) & (steps["rank"] == 0), "loss"] = float("nan")
    text = "[rank1]: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n"
    events = parse_launcher_log(text)
    completion = measures.run_completion({0: 4, 1: 4}, [{"rank": 1, "kind": "fatal_loss_scale", "message": "m",
                                                         "exit_code": None, "last_lines": ["l"]}], True, 4, 2)
    measured, problems, evidence = gates.nonfinite(steps, events, completion, ["loss", "grad_norm", "absent"])
    assert measured == 2.0  # one non-finite step + the abort
    assert problems == ["rank 1 failed: m"]
    assert evidence == {
        "faults(count)": 2, "nonfinite_steps(count)": 1,
        "nonfinite_events": [{"step(step)": 3, "ranks(rank)": [0], "metrics": ["loss"], "sources": ["step records"]}],
        "fatal_loss_scale_abort": True, "fatal_loss_scale_ranks(rank)": [1], "metrics": ["loss", "grad_norm"],
        "finished": True,
        "failures": [{"rank(rank)": 1, "kind": "fatal_loss_scale", "message": "m", "exit_code(code)": None,
                      "last_lines": ["l"]}],
        "last_step_per_rank(step)": {0: 4, 1: 4}, "stopped_early_at(step)": {}, "failed_ranks(rank)": [1],
        "run_complete": False}


def test_nonfinite_gate_without_its_metrics_is_not_measured():
    completion = measures.run_completion({0: 4}, [], True, 4, 1)
    with pytest.raises(gates.NotMeasured) as reason:
        gates.nonfinite(pd.DataFrame({"rank": [0], "step": [1]}), no_events(), completion, ["loss", "grad_norm"])
    assert str(reason.value) == "none of ['loss', 'grad_norm'] in the run's step records"


def test_failed_ranks_evidence_holds_the_record_counts():
    records = measures.record_completeness(synthetic_steps(steps=3), 2, 3)
    completion = measures.run_completion({0: 3, 1: 3}, [], True, 3, 2, records)
    measured, evidence = gates.failed_ranks(completion, records)
    assert measured == 0.0 and evidence["records"] == records.evidence()
    assert set(evidence) == {"finished", "failures", "last_step_per_rank(step)", "stopped_early_at(step)",
                             "failed_ranks(rank)", "run_complete", "records"}


def test_stabiliser_nonfinite_keeps_the_rank_or_none(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [
        {"step": 12, "rank": 1, "kind": "nonfinite_loss", "value": "nan", "action": "skip"},
        {"step": 13, "rank": None, "kind": "nonfinite_grad_norm", "value": "inf", "action": "rollback"},
        {"step": 14, "rank": 0, "kind": "loss_spike", "value": 9.0, "action": "skip"}]))
    assert gates.stabiliser_nonfinite(stabiliser_events(path)) == [(12, 1, "nonfinite_loss"),
                                                                   (13, None, "nonfinite_grad_norm")]


def test_require_values_names_every_rank_with_a_gap():
    steps = synthetic_steps(steps=10)
    steps.loc[(steps["rank"] == 0) & (steps["step"] == 7), STEP_TIME] = np.nan
    steps.loc[(steps["rank"] == 1) & (steps["step"].isin([8, 9])), STEP_TIME] = np.inf
    with pytest.raises(gates.NotMeasured) as reason:
        gates.require_values(steps, STEP_TIME)
    assert str(reason.value) == "'step_time(s)' missing or non-finite at rank 0: 1 steps (7); rank 1: 2 steps (8, 9)"


# ---- the floor's terms -----------------------------------------------------------------------------

def floor_plan(**changes):
    floor = {"accumulation": 4,
             "ranks": [{"micro_step_floor(s)": 0.5, "terms": {"compute(s)": 0.5, "collectives(s)": 0.25}},
                       {"micro_step_floor(s)": 0.75, "terms": {"compute(s)": 0.75, "collectives(s)": 0.125,
                                                               "memory(s)": None}},
                       {"micro_step_floor(s)": None, "terms": {"compute(s)": 9.0}}],
             "boundary_terms": {"collectives(s)": 0.5}, "optimizer_terms": {"cpu_adam(s)": 1.0}}
    floor.update(changes)
    return {"floor": {k: v for k, v in floor.items() if v is not None}}


def test_floor_terms_of_the_deciding_rank_times_the_accumulation():
    # The deciding rank: the largest micro-step floor (0.75 s, the second); a rank without one is left out.
    assert gates.floor_terms(floor_plan()) == {
        "micro_step compute x 4(s)": 4 * 0.75, "micro_step collectives x 4(s)": 4 * 0.125,
        "micro_step memory x 4(s)": None, "boundary collectives(s)": 0.5, "optimizer cpu_adam(s)": 1.0}
    assert gates.floor_terms(floor_plan(boundary_terms=None, optimizer_terms=None)) == {
        "micro_step compute x 4(s)": 3.0, "micro_step collectives x 4(s)": 0.5, "micro_step memory x 4(s)": None}


def test_floor_terms_are_empty_without_ranks_or_accumulation():
    assert gates.floor_terms(None) == {} and gates.floor_terms({}) == {}
    assert gates.floor_terms(floor_plan(accumulation=None)) == {}
    assert gates.floor_terms(floor_plan(ranks=None)) == {}
    assert gates.floor_terms(floor_plan(ranks=[{"micro_step_floor(s)": None, "terms": {"compute(s)": 1.0}}])) == {}


def test_floor_ratio_evidence_carries_the_floor_terms():
    plan = floor_plan(**{"optimizer_step(s)": 0.25})
    ratio, evidence = gates.floor_ratio(synthetic_steps(steps=20, step_time=0.5, noise=0.0), STEP_TIME, 5, plan)
    assert evidence["floor(s)"] == 0.25 and evidence["floor_terms(s)"] == gates.floor_terms(plan)
    assert ratio == evidence["median_step_time(s)"] / 0.25


# ---- reproduction and the whole evaluation ---------------------------------------------------------

def test_faithfulness_reasons_exactly():
    deviation = {"path": "fp16.enabled", "claim": True, "rendered": False, "reason": "no fp16", "changes_experiment": True}
    harmless = {**deviation, "path": "steps_per_print", "changes_experiment": False}
    assert gates.faithfulness([deviation, harmless], CPU_FINGERPRINT) == {"faithful": False, "reasons": [
        "fp16.enabled: True -> False (no fp16)",
        "hardware differs from the claim's RTX 5070 + RTX 4090: no GPU (CPU accelerator)"]}
    twins = gpu_fingerprint(("NVIDIA A100", 40), ("NVIDIA A100", 40))
    assert gates.faithfulness([], twins) == {"faithful": False, "reasons": [
        "hardware differs from the claim's RTX 5070 + RTX 4090: NVIDIA A100, NVIDIA A100"]}
    three = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24), ("RTX 4090", 24))
    assert not gates.faithfulness([], three)["faithful"]


def test_evaluate_takes_the_world_size_from_the_summary_or_the_run_metadata(tiny_profile):
    spec = {"training": {"optimizer_steps": 200}}
    steps = synthetic_steps()
    step_gate = [g for g in tiny_profile["gates"] if g["name"] in ("optimizer_step_time", "zero_nonfinite")]
    rule = spike_rule(tiny_profile)
    summary = {"completed_steps": 200, "world_size": 2}
    judged = gates.evaluate(step_gate, steps, no_events(), summary, spec, [], CPU_FINGERPRINT, 5, rule)
    assert [g["verdict"] for g in judged["gates"]] == [gates.PASS, gates.PASS]
    assert judged["reproduction"] == gates.faithfulness([], CPU_FINGERPRINT)
    meta = run_metadata(steps, no_events(), summary, "", 200)
    from_meta = gates.evaluate(step_gate[:1], steps, no_events(), None, spec, [], CPU_FINGERPRINT, 5, rule,
                               run_meta=meta)
    assert from_meta["gates"][0]["verdict"] == gates.PASS


# ---- parse_run: several logs, node fingerprints, an undecodable byte ---------------------------------

def test_parse_run_over_two_node_logs_and_node_fingerprints(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    for rank in (0, 1):
        (metrics / f"rank{rank}.jsonl").write_text(
            "".join(json.dumps({"rank": rank, "step": s, "loss": 1.0}) + "\n" for s in (1, 2)))
    for node in (10, 2, 0, 1):
        (metrics / f"node{node}.json").write_text(json.dumps({"node": node}))
    first, second = tmp_path / "node0.log", tmp_path / "node1.log"
    first.write_bytes(b"[Rank 0] step=2, skipped=0, lr=[1e-05]\nhalf a character: \xe2\x82")
    second.write_text("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"x.py\", line 1\n"
                      "[rank1]: RuntimeError: boom\n"
                      "[launch.py] --local_rank=3' exits with return code = 1\n")
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("")
    steps, events, meta = parse_run(metrics, [first, second], {"world_size": 2}, events_file, 2)
    assert [n["node"] for n in meta["nodes"]] == [0, 1, 2, 10]
    assert meta["failed_ranks"] == [1, 3]
    exit_failure = next(f for f in meta["failures"] if f["kind"] == "rank_exit_error")
    assert exit_failure["exit_code"] == 1.0
    assert exit_failure["last_lines"] == [
        "[Rank 0] step=2, skipped=0, lr=[1e-05]", "half a character: \ufffd",
        "[rank1]: Traceback (most recent call last):", "[rank1]:   File \"x.py\", line 1",
        "[rank1]: RuntimeError: boom",
        "[launch.py] --local_rank=3' exits with return code = 1"]
    assert list(events.index) == list(range(len(events)))
    events_file.write_text('{"step": 2, "rank": 0, "kind": "loss_spike", "value": 9.0, "action": "skip"}\n')
    _, with_stabiliser, _ = parse_run(metrics, first, {"world_size": 2}, events_file, 2)
    assert list(with_stabiliser.index) == list(range(len(with_stabiliser)))
    assert with_stabiliser["kind"].tolist() == ["ds_progress", "stabiliser"]


def test_rank_metrics_table_has_no_index_column(tmp_path):
    (tmp_path / "rank1.jsonl").write_text(json.dumps({"rank": 1, "step": 1, "loss": 2.0}) + "\n")
    (tmp_path / "rank0.jsonl").write_text(json.dumps({"rank": 0, "step": 2, "loss": 1.0}) + "\n"
                                          + json.dumps({"rank": 0, "step": 1, "loss": 1.5}) + "\n")
    steps = read_rank_metrics(tmp_path)
    assert list(steps.columns) == ["rank", "step", "loss"] and list(steps.index) == [0, 1, 2]
    assert steps[["rank", "step"]].values.tolist() == [[0, 1], [0, 2], [1, 1]]
