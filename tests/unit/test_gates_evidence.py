"""The judging code's evidence and messages, exactly, on small runs whose right answers are worked out by
hand in each test (written to kill the mutants of zerogate.analysis.{gates,measures,parse}).

Evidence keys carry units and are the product's user-visible contract (zerogate.contracts.verdicts), so the
whole evidence is asserted in the form gates/verdicts.json holds it; the boundary cases sit exactly at the
thresholds the definitions name. Every run is built from StepRecords (tests.unit.helpers)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import (
    judged_run,
    no_events,
    planned_run,
    run_spec_for,
    settings,
    step_record,
    synthetic_steps,
    table_of,
    train_summary,
)
from zerogate.analysis import gate_measures, gates, measures
from zerogate.analysis.columns import (
    COLLECTIVES_TIME,
    COMMUNICATION,
    COMPUTE,
    MICRO_STEP_TIME,
    STEP_TIME,
    WAIT,
)
from zerogate.analysis.health import (
    completion_of,
    missing_values,
    nonfinite_events,
    record_completeness,
    run_completion,
    step_span,
)
from zerogate.analysis.loss_trend import Convergence, ConvergenceRule, loss_convergence, loss_spikes
from zerogate.analysis.parse import (
    STEP_COLUMNS,
    parse_launcher_log,
    parse_run,
    read_rank_metrics,
    run_metadata,
    stabiliser_events,
)
from zerogate.analysis.rank_balance import rank_balance, rank_times
from zerogate.analysis.summary import run_statistics
from zerogate.config.judging import ConvergenceRuleSettings
from zerogate.contracts.base import ContractError, write_lines
from zerogate.contracts.machine import NodeFingerprint
from zerogate.contracts.parsed import Failure, RunMeta
from zerogate.contracts.plan import FloorRank, Plan
from zerogate.contracts.records import StabiliserEvent
from zerogate.contracts.run import Deviation, Deviations
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import NonfiniteEventEvidence, Reproduction

RULE = SpikeRule(window=16, threshold=6.0, min_history=5)
PROFILE = settings("cpu-tiny")


# ---- the run's real inputs, built by their producers ----------------------------------------------------


def file_form(record):
    """A contract object as its file holds it (keys with units), per-rank keys kept as ranks."""
    return record.model_dump(by_alias=True)


def timed_record(rank: int, step: int, t: float, c: float | None, device: str):
    return step_record(rank=rank, step=step, step_time_s=t, collectives_s=c, device=device)


def timed_run(rows: dict[int, list[tuple[float, float | None]]], device: str = "cpu") -> pd.DataFrame:
    """Records from {rank: [(step_time(s), collectives(s)) per step 1, 2, ...]}."""
    return table_of(
        [
            timed_record(rank, step, t, c, device)
            for rank, series in rows.items()
            for step, (t, c) in enumerate(series, start=1)
        ]
    )


# ---- who waits for whom: rank_balance, its evidence and its problems ------------------------

# Step 1 is the warm-up (wild values, left out). Steps 2 and 3, both ranks finishing together:
#   step 2: T = 1.0; compute 0.5 (rank 0), 0.75 (rank 1) -> collectives 0.5, 0.25; communication 0.25;
#           wait 0.25 (rank 0), 0 (rank 1)
#   step 3: T = 2.0; compute 0.5, 1.25 -> collectives 1.5, 0.75; communication 0.75; wait 0.75, 0
STRAGGLING = {0: [(9.0, 8.0), (1.0, 0.5), (2.0, 1.5)], 1: [(9.0, 1.0), (1.0, 0.25), (2.0, 0.75)]}


def test_rank_balance_evidence_by_hand():
    balance = rank_balance(timed_run(STRAGGLING), 1, world_size=2)
    assert balance.evidence() == {
        "ranks(rank)": [0, 1],
        "timed_steps(steps)": 2,
        "compute_median(s)": {0: 0.5, 1: (0.75 + 1.25) / 2},
        "wait_median(s)": {0: (0.25 + 0.75) / 2, 1: 0.0},
        "wait_total(s)": {0: 0.25 + 0.75, 1: 0.0},
        "wait_share(ratio)": {0: (0.25 + 0.75) / (1.0 + 2.0), 1: 0.0},
        "step_time_median(s)": {0: 1.5, 1: 1.5},
        "communication_median(s)": (0.25 + 0.75) / 2,
        "slowest_rank": 1,
        "straggler_rank": 1,
        "next_slowest_rank": 0,
        "compute_excess(s)": 1.0 - 0.5,
        "compute_excess(ratio)": (1.0 - 0.5) / 0.5,
        "straggler_margin(ratio of step time)": 0.10,
        "problems": [],
    }
    assert balance.pace == 1.5  # the slowest rank's median step time: the margin's base (0.15 s < 0.5 s)


def test_rank_balance_names_rank_0_when_it_is_the_straggler():
    swapped = {0: STRAGGLING[1], 1: STRAGGLING[0]}
    balance = rank_balance(timed_run(swapped), 1, world_size=2)
    assert (balance.slowest, balance.straggler, balance.next_slowest) == (0, 0, 1)
    assert balance.compute == {0: 1.0, 1: 0.5} and balance.wait == {0: 0.0, 1: 0.5}


def test_a_difference_of_exactly_the_margin_names_no_straggler():
    # Both steps: T = 10 s; compute 2 s (rank 0) and 3 s (rank 1). Excess 1 s = 0.10 x 10 s: not more.
    exact = rank_balance(timed_run({0: [(10.0, 8.0)] * 3, 1: [(10.0, 7.0)] * 3}), 1, world_size=2)
    assert exact.excess == 1.0 and exact.pace == 10.0 and 0.10 * 10.0 == 1.0
    assert exact.slowest == 1 and exact.straggler is None and exact.waiting_for_straggler == {}
    # Noise, not a straggler: the run statistics' straggler fields report no excess either.
    assert exact.summary() == {
        "straggler_rank": None,
        "straggler_compute_excess_s": None,
        "wait_for_straggler_median_s": None,
    }
    beyond = rank_balance(timed_run({0: [(10.0, 7.75)] * 3, 1: [(10.0, 6.5)] * 3}), 1, world_size=2)
    assert beyond.excess == 3.5 - 2.25 and beyond.straggler == 1


def test_a_next_slowest_rank_with_no_compute_gives_an_infinite_excess_ratio():
    # Rank 0 spent its whole step in collectives (compute 0): the excess over it is no finite share of it.
    balance = rank_balance(timed_run({0: [(1.0, 1.0)] * 2, 1: [(1.0, 0.5)] * 2}), 0, world_size=2)
    assert balance.compute == {0: 0.0, 1: 0.5} and balance.next_slowest == 0
    assert balance.excess == 0.5 and balance.excess_ratio == math.inf


def test_wait_share_of_a_rank_with_sub_second_or_no_step_time():
    # One step: rank 0's record says 0 s (and 0.5 s in collectives), rank 1's 0.5 s with 0.25 s in them.
    # communication 0.25; wait 0.25 (rank 0), 0 (rank 1); rank 0's share has no base: NaN, never inf.
    balance = rank_balance(timed_run({0: [(0.0, 0.5)], 1: [(0.5, 0.25)]}), 0, world_size=2)
    assert balance.wait_total == {0: 0.25, 1: 0.0}
    assert math.isnan(balance.wait_share[0]) and balance.wait_share[1] == 0.0 / 0.5


def test_rank_balance_not_measured_keeps_its_ranks_and_counts_and_says_why():
    run = timed_run(STRAGGLING)
    balance = rank_balance(run[run["rank"] == 0], 1, world_size=2)
    assert balance.evidence() == {
        "ranks(rank)": [0],
        "timed_steps(steps)": 2,
        "compute_median(s)": {},
        "wait_median(s)": {},
        "wait_total(s)": {},
        "wait_share(ratio)": {},
        "step_time_median(s)": {},
        "communication_median(s)": None,
        "slowest_rank": None,
        "straggler_rank": None,
        "next_slowest_rank": None,
        "compute_excess(s)": None,
        "compute_excess(ratio)": None,
        "straggler_margin(ratio of step time)": 0.10,
        "problems": ["ranks with no timed step records: [1] of world size 2"],
    }
    assert balance.pace is None and not balance.measured


def test_a_run_within_its_warmup_has_no_timed_step_to_balance():
    balance = rank_balance(timed_run(STRAGGLING), 3, world_size=2)
    assert balance.ranks == [] and balance.timed_steps == 0
    assert balance.problems == [
        "ranks with no timed step records: [0, 1] of world size 2",
        "no timed step (the run stopped within its warm-up)",
    ]
    one = rank_balance(timed_run({0: [(1.0, 0.5)] * 2}), 2)
    assert one.problems == [
        "a single rank waits for no other",
        "no timed step (the run stopped within its warm-up)",
    ]


def test_rank_time_problems_exactly():
    run = timed_run(STRAGGLING)
    # The records of a run with the metrics layer's collective clock off: collectives(s) null at every step.
    unclocked = timed_run({rank: [(t, None) for t, _ in series] for rank, series in STRAGGLING.items()})
    old = rank_balance(unclocked, 1, 2)
    assert old.problems == [
        "the step records hold no collectives(s) (zerogate.train.metrics records it; a run with "
        "the metrics layer off, or from before it, has none)"
    ]
    empty = rank_balance(run.assign(**{COLLECTIVES_TIME: None}), 1, 2)
    assert empty.problems == old.problems
    mixed = run.assign(device=["cpu", "cuda:1", "cuda:0", "cpu", None, "cuda:1"])
    assert rank_balance(mixed, 1, 2).problems == [
        "collectives(s) is host time, and on cuda:0 NCCL returns once a collective is queued: "
        "the device's wait is not measured"
    ]
    # Every record on the CPU accelerator: the host time is the wait.
    assert set(run["device"]) == {"cpu"} and rank_balance(run, 1, 2).problems == []


def test_rank_time_problems_name_each_ranks_missing_steps_and_gaps():
    run = timed_run({0: [(1.0, 0.5)] * 12, 1: [(1.0, 0.25)] * 12, 2: [(1.0, 0.25)] * 12})
    run = run[~((run["rank"] == 2) & (run["step"].isin([3, 4])))]
    run.loc[(run["rank"] == 1) & (run["step"] == 5), STEP_TIME] = np.nan
    run.loc[(run["rank"] == 0) & (run["step"] > 2), COLLECTIVES_TIME] = np.inf
    balance = rank_balance(run, 0, world_size=3)
    assert balance.problems == [
        "rank 2: 2 timed steps missing (3, 4)",
        "rank 1: step_time(s) missing or non-finite at 1 steps (5)",
        "rank 0: collectives(s) missing or non-finite at 10 steps (3, 4, 5, 6, 7, 8, 9, 10 and 2 more)",
    ]
    assert balance.ranks == [0, 1, 2] and balance.timed_steps == 12


def test_rank_times_table_columns_and_types():
    run = timed_run(STRAGGLING).astype({"rank": float, "step": float})  # as a table with gaps holds them
    frame = rank_times(run, 1)
    assert list(frame.columns) == [
        "rank",
        "step",
        STEP_TIME,
        COLLECTIVES_TIME,
        COMMUNICATION,
        WAIT,
        COMPUTE,
    ]
    assert frame["rank"].dtype.kind == "i" and frame["step"].dtype.kind == "i"
    assert list(frame.index) == [0, 1, 2, 3]
    assert frame[WAIT].tolist() == [0.25, 0.75, 0.0, 0.0]
    assert frame[COMPUTE].tolist() == [0.5, 0.5, 0.75, 1.25]
    # Records without collective times: every derived column is NaN, the step time is kept.
    bare = rank_times(timed_run(STRAGGLING).assign(**{COLLECTIVES_TIME: None}), 1)
    assert bare[STEP_TIME].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert bare[[COLLECTIVES_TIME, COMMUNICATION, WAIT, COMPUTE]].isna().all().all()


def test_a_value_that_is_no_number_counts_as_missing():
    run = timed_run(STRAGGLING).astype({STEP_TIME: object, COLLECTIVES_TIME: object})
    run.loc[(run["rank"] == 1) & (run["step"] == 3), [STEP_TIME, COLLECTIVES_TIME]] = "n/a"
    frame = rank_times(run, 1)
    assert frame[STEP_TIME].isna().sum() == 1 and frame[COLLECTIVES_TIME].isna().sum() == 1
    assert missing_values(run, STEP_TIME) == {1: [3]}
    lossy = table_of([step_record(step=1, loss=1.0), step_record(step=2, loss=1.0)]).astype({"loss": object})
    lossy.loc[lossy["step"] == 2, "loss"] = "n/a"
    assert [e.step for e in nonfinite_events(lossy, ["loss"], [])] == [2]


# ---- small definitions at their boundaries -------------------------------------------------------


def test_span_shows_eight_numbers_then_how_many_more():
    assert step_span(list(range(1, 9))) == "1, 2, 3, 4, 5, 6, 7, 8"
    assert step_span(list(range(1, 10))) == "1, 2, 3, 4, 5, 6, 7, 8 and 1 more"


def test_overflow_skipped_count_at_the_warmup_boundary():
    run = table_of(
        [
            step_record(step=step, loss_scale=1.0, skip_reason=reason)
            for step, reason in ((1, None), (2, "fp16_overflow"), (3, None))
        ]
    )
    assert measures.overflow_skipped_count(run, 2) == 0  # the skip at step 2 is inside a 2-step warm-up
    assert measures.overflow_skipped_count(run, 1) == 1
    assert measures.after_warmup(run, 2)["step"].tolist() == [3]


def test_smooth_keeps_a_single_value():
    assert measures.smooth(pd.Series([3.0])).tolist() == [3.0]


def test_nonfinite_events_read_every_listed_metric_present():
    # No gradient norm recorded (DeepSpeed returned none): only the loss can be a fault.
    steps = table_of(
        [
            step_record(step=1, loss=1.0, grad_norm=None),
            step_record(step=2, loss=float("nan"), grad_norm=None),
        ]
    )
    found = nonfinite_events(steps, ["grad_norm", "loss"], [])
    assert [e.evidence() for e in found] == [
        NonfiniteEventEvidence(step=2, ranks=[0], metrics=["loss"], sources=["step records"])
    ]
    assert file_form(found[0].evidence()) == {
        "step(step)": 2,
        "ranks(rank)": [0],
        "metrics": ["loss"],
        "sources": ["step records"],
    }


def test_completion_of_counts_the_ranks_of_the_world_size():
    only_rank0 = table_of([step_record(step=step) for step in range(1, 11)])
    meta = run_metadata(only_rank0, no_events(), train_summary(10, world_size=2), "", 10)
    meta = RunMeta.parse(json.loads(json.dumps(meta.as_json())), "parsed/run.json")  # as run.json holds it
    assert meta.steps_completed_per_rank == {0: 10} and meta.world_size == 2
    completion = completion_of(meta)
    assert completion.steps_per_rank == {0: 10, 1: 0} and completion.stopped_early == {1: 0}
    assert completion.failed_ranks == [1] and not completion.complete


def test_run_statistics_under_fp16_and_without_micro_steps_or_losses():
    frame = table_of(
        [
            step_record(
                step=step,
                loss=float("nan"),
                step_time_s=float(step),
                loss_scale=1.0,
                skip_reason="fp16_overflow" if step == 11 else None,
            )
            for step in range(1, 12)
        ]
    )
    frame[MICRO_STEP_TIME] = None  # a table whose micro-step column holds no value
    stats = run_statistics(frame, 0, RULE)
    # Timed steps 1..10 (step 11 skipped): median 5.5; p90 = 9 + 0.1 x (10 - 9) by linear interpolation.
    assert stats.step_time_median_s == 5.5 and stats.step_time_p90_s == pytest.approx(9.1)
    assert stats.overflow_skipped_steps == 1 and stats.micro_step_time_median_s is None
    assert stats.first_loss is None and stats.final_loss is None


# ---- loss convergence: the figures by hand, and the rule's boundaries --------------------------------


def loss_run(values):
    return table_of([step_record(step=step, loss=value) for step, value in enumerate(values, start=1)])


def figures(found: Convergence):
    return (
        found.steps,
        found.nonfinite_steps,
        found.initial,
        found.final,
        found.lowest_block,
        found.final_spread,
        found.ratio,
        found.rebound,
        found.drop_sigmas,
    )


def test_convergence_figures_one_step_blocks():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    # Rising: block 1 (4 x 0.25); initial = the first loss 1; blocks (from the end) 4, 3, 2, 1; final 4,
    # lowest 1; a one-loss final block has no spread; nothing dropped: drop 0 sigmas, rebound inf; ratio 4 /
    # 1.
    assert figures(loss_convergence(loss_run([1.0, 2.0, 3.0, 4.0]), rule)) == (
        4,
        [],
        1.0,
        4.0,
        1.0,
        0.0,
        4.0,
        math.inf,
        0.0,
    )
    # Falling by less than 1: initial 1, final 0.75, lowest 0.25; spread 0 and a drop: inf sigmas;
    # rebound (0.75 - 0.25) / (1 - 0.25).
    assert figures(loss_convergence(loss_run([1.0, 0.25, 0.5, 0.75]), rule)) == (
        4,
        [],
        1.0,
        0.75,
        0.25,
        0.0,
        0.75,
        0.5 / 0.75,
        math.inf,
    )


def test_convergence_figures_two_step_blocks_and_a_partial_first_block():
    rule = ConvergenceRule(initial_steps=2, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    # n = 8, block 2: initial median(4, 6) = 5; blocks [1.5, 2.5] 2, [2, 2.5] 2.25, [1, 1] 1, [4, 6] 5;
    # spread: median |tail - 2| = 0.5, x 1.4826; drop 3; rebound (2 - 1) / (5 - 1); ratio 2 / 5.
    found = loss_convergence(loss_run([4.0, 6.0, 1.0, 1.0, 2.0, 2.5, 1.5, 2.5]), rule)
    assert figures(found)[:6] == (8, [], 5.0, 2.0, 1.0, 0.5 * 1.4826)
    assert (found.ratio, found.rebound) == (2.0 / 5.0, 0.25)
    assert found.drop_sigmas == pytest.approx(3.0 / (0.5 * 1.4826))
    # n = 5, final_fraction 0.4: block 2; blocks from the end [2, 2] 2, [3, 3] 3, then the first loss alone:
    # 1; nothing fell below the initial loss 1, and the final block is above it: rebound inf.
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.4, max_rebound=0.5, min_drop_sigmas=3.0)
    found = loss_convergence(loss_run([1.0, 3.0, 3.0, 2.0, 2.0]), rule)
    assert (found.initial, found.final, found.lowest_block, found.rebound) == (1.0, 2.0, 1.0, math.inf)


def test_convergence_without_a_positive_initial_loss_has_no_ratio():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    found = loss_convergence(loss_run([0.0, 0.0, 0.0, 0.0]), rule)
    assert math.isnan(found.ratio) and found.rebound == 0.0 and found.drop_sigmas == 0.0


def test_convergence_over_a_non_finite_loss_is_nan_throughout():
    rule = ConvergenceRule(initial_steps=1, final_fraction=0.25, max_rebound=0.5, min_drop_sigmas=3.0)
    found = loss_convergence(loss_run([3.0, float("inf"), 1.0, float("nan")]), rule)
    assert found.steps == 4 and found.nonfinite_steps == [2, 4]
    assert all(math.isnan(v) for v in figures(found)[2:])


def test_convergence_problems_at_the_rules_thresholds():
    rule = ConvergenceRule(initial_steps=3, final_fraction=0.1, max_rebound=0.25, min_drop_sigmas=3.0)

    def judged(sigmas, rebound):
        return Convergence(10, [], 5.0, 1.0, 1.0, 0.1, 0.2, rebound, sigmas).problems(rule)

    assert judged(3.0, 0.25) == []  # exactly at both thresholds: passes (>= 3 sigmas, <= 0.25)
    assert judged(2.99, 0.26) == [
        "the drop from the initial to the final loss is 2.99 final-block standard deviations, not >= 3",
        "the final loss is back up 0.26 of the drop to the lowest block mean (more than 0.25)",
    ]


def convergence_gate(initial_steps=2, final_fraction=0.25):
    """The profile's loss_convergence gate with its convergence block changed."""
    profile_gate = next(g for g in PROFILE.gates if g.statistic == "loss_convergence")
    return profile_gate.model_copy(
        update={
            "convergence": ConvergenceRuleSettings(
                initial_steps=initial_steps,
                final_fraction=final_fraction,
                max_rebound=0.5,
                min_drop_sigmas=3.0,
            )
        }
    )


def convergence_with_spikes(steps, gate):
    """The loss_convergence gate's measurement, with the run's loss spikes as its summary counts them."""
    return gate_measures.loss_convergence_gate(steps, gate, loss_spikes(steps, RULE))


def test_loss_convergence_gate_evidence_by_hand():
    values = [4.0, 6.0, 1.0, 1.0, 2.0, 2.5, 1.5, 2.5]  # the figures of the two-step-block test above
    ratio, problems, evidence = convergence_with_spikes(loss_run(values), convergence_gate())
    assert ratio == 2.0 / 5.0 and problems == []
    assert file_form(evidence) == {
        "kind": "loss_convergence",
        "steps(steps)": 8,
        "nonfinite_loss_steps(step)": [],
        "initial_loss(nats/token)": 5.0,
        "final_loss(nats/token)": 2.0,
        "lowest_block_mean_loss(nats/token)": 1.0,
        "final_block_spread(nats/token)": 0.5 * 1.4826,
        "rebound(ratio)": 0.25,
        "drop(final-block sigmas)": pytest.approx(3.0 / (0.5 * 1.4826)),
        "rule": {
            "initial_steps(steps)": 2,
            "final_fraction(ratio)": 0.25,
            "max_rebound(ratio)": 0.5,
            "min_drop(final-block sigmas)": 3.0,
        },
        "spikes(count)": 0,
        "spike_steps(step)": [],
        "spike_rule": RULE.describe(),
    }


def test_loss_convergence_gate_evidence_of_a_non_finite_loss_is_none_not_nan():
    _, problems, evidence = convergence_with_spikes(
        loss_run([3.0, float("nan"), 2.0, 1.0]), convergence_gate()
    )
    assert problems == ["non-finite loss at 1 steps (2)"]
    assert evidence.nonfinite_loss_steps == [2]
    assert [
        evidence.initial_loss,
        evidence.final_loss,
        evidence.lowest_block_mean_loss,
        evidence.final_block_spread,
        evidence.rebound,
        evidence.drop_sigmas,
    ] == [None] * 6
    assert (
        json.loads(json.dumps(evidence.as_json()))["initial_loss(nats/token)"] is None
    )  # valid JSON, no NaN
    assert gate_measures._finite_or_none(None) is None and gate_measures._finite_or_none(math.inf) is None
    assert gate_measures._finite_or_none(np.float64(2.5)) == 2.5


def test_loss_convergence_gate_spike_steps():
    values = [3.0, 3.01, 2.99, 3.0, 3.02, 2.98, 3.0, 9.0, 3.0, 2.99, 3.01, 3.0]
    _, _, evidence = convergence_with_spikes(loss_run(values), convergence_gate())
    assert evidence.spikes == 1 and evidence.spike_steps == [8]


def test_loss_convergence_needs_twice_the_initial_steps_and_at_least_two():
    ratio, _, evidence = convergence_with_spikes(
        loss_run([2.0, 1.0]), convergence_gate(initial_steps=1, final_fraction=0.5)
    )
    assert evidence.steps == 2 and ratio == 0.5
    with pytest.raises(gate_measures.NotMeasured, match="only 1 loss values: too few to tell a trend"):
        convergence_with_spikes(loss_run([2.0]), convergence_gate(initial_steps=1))


# ---- the non-finite gate and the completion evidence -----------------------------------------------


def test_nonfinite_gate_evidence_with_a_fatal_loss_scale_abort():
    steps = synthetic_steps(steps=4)
    steps.loc[(steps["step"] == 3) & (steps["rank"] == 0), "loss"] = float("nan")
    text = "[rank1]: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n"
    events = parse_launcher_log(text)
    records = record_completeness(steps, 2, 4)
    completion = run_completion(
        {0: 4, 1: 4},
        [Failure(rank=1, kind="fatal_loss_scale", message="m", exit_code=None, last_lines=["l"])],
        True,
        4,
        2,
    )
    measured, problems, evidence = gate_measures.nonfinite(
        steps, events, completion, ["loss", "grad_norm", "absent"], records
    )
    assert measured == 2.0  # one non-finite step + the abort
    assert problems == ["rank 1 failed: m"]
    assert file_form(evidence) == {
        "kind": "nonfinite_count",
        "faults(count)": 2,
        "nonfinite_steps(count)": 1,
        "nonfinite_events": [
            {"step(step)": 3, "ranks(rank)": [0], "metrics": ["loss"], "sources": ["step records"]}
        ],
        "fatal_loss_scale_abort": True,
        "fatal_loss_scale_ranks(rank)": [1],
        "metrics": ["loss", "grad_norm"],
        "finished": True,
        "failures": [
            {
                "rank(rank)": 1,
                "kind": "fatal_loss_scale",
                "message": "m",
                "exit_code(code)": None,
                "last_lines": ["l"],
            }
        ],
        "last_step_per_rank(step)": {0: 4, 1: 4},
        "stopped_early_at(step)": {},
        "failed_ranks(rank)": [1],
        "run_complete": False,
        "records": file_form(records.evidence()),
    }
    assert file_form(records.evidence())["steps_per_rank(steps)"] == {0: 4, 1: 4}


def test_nonfinite_gate_without_its_metrics_is_not_measured():
    # A gate naming metrics the step records do not hold (the table holds every StepRecord key, not these).
    steps = table_of([step_record()])
    completion = run_completion({0: 1}, [], True, 1, 1)
    with pytest.raises(gate_measures.NotMeasured) as reason:
        gate_measures.nonfinite(
            steps,
            no_events(),
            completion,
            ["loss_sum", "grad_norm_sum"],
            record_completeness(steps, 1, 1),
        )
    assert str(reason.value) == "none of ['loss_sum', 'grad_norm_sum'] in the run's step records"


def test_failed_ranks_evidence_holds_the_record_counts():
    records = record_completeness(synthetic_steps(steps=3), 2, 3)
    completion = run_completion({0: 3, 1: 3}, [], True, 3, 2, records)
    measured, evidence = gate_measures.failed_ranks(completion, records)
    assert measured == 0.0 and evidence.records == records.evidence()
    assert set(file_form(evidence)) == {
        "kind",
        "finished",
        "failures",
        "last_step_per_rank(step)",
        "stopped_early_at(step)",
        "failed_ranks(rank)",
        "run_complete",
        "records",
    }


def test_stabiliser_nonfinite_keeps_the_rank_or_none(tmp_path):
    path = tmp_path / "events.jsonl"
    write_lines(
        path,
        [
            StabiliserEvent(step=12, rank=1, kind="nonfinite_loss", value="nan", action="skip"),
            StabiliserEvent(step=13, rank=0, kind="nonfinite_grad_norm", value="inf", action="rollback"),
            StabiliserEvent(step=14, rank=0, kind="loss_spike", value=9.0, action="skip"),
        ],
    )
    events = stabiliser_events(path)
    assert gate_measures.stabiliser_nonfinite(events) == [
        (12, 1, "nonfinite_loss"),
        (13, 0, "nonfinite_grad_norm"),
    ]
    # The events table's rank is nullable (a launcher line may name no rank): a row without one keeps None.
    events.loc[events["step"] == 13, "rank"] = pd.NA
    assert gate_measures.stabiliser_nonfinite(events) == [
        (12, 1, "nonfinite_loss"),
        (13, None, "nonfinite_grad_norm"),
    ]


def test_require_values_names_every_rank_with_a_gap():
    steps = synthetic_steps(steps=10)
    steps.loc[(steps["rank"] == 0) & (steps["step"] == 7), STEP_TIME] = np.nan
    steps.loc[(steps["rank"] == 1) & (steps["step"].isin([8, 9])), STEP_TIME] = np.inf
    with pytest.raises(gate_measures.NotMeasured) as reason:
        gate_measures.require_values(steps, STEP_TIME)
    assert (
        str(reason.value)
        == "'step_time(s)' missing or non-finite at rank 0: 1 steps (7); rank 1: 2 steps (8, 9)"
    )


# ---- the floor's terms -----------------------------------------------------------------------------

FLOOR_RANKS = [
    FloorRank(
        rank=0, device="cpu", terms={"compute(s)": 0.5, "collectives(s)": 0.25}, micro_step_floor_s=0.5
    ),
    FloorRank(
        rank=1,
        device="cpu",
        terms={"compute(s)": 0.75, "collectives(s)": 0.125, "memory(s)": None},
        micro_step_floor_s=0.75,
    ),
    FloorRank(rank=2, device="cpu", terms={"compute(s)": 9.0}, micro_step_floor_s=None),
]


def floor_plan(**changes) -> Plan:
    """The planner's plan of the run with its floor's terms set by hand (this machine gives it no figures)."""
    floor = {
        "accumulation": 4,
        "ranks": FLOOR_RANKS,
        "boundary_terms": {"collectives(s)": 0.5},
        "optimizer_terms": {"cpu_adam(s)": 1.0},
    } | changes
    planned = planned_run()
    return planned.model_copy(update={"floor": planned.floor.model_copy(update=floor)})


def test_floor_terms_of_the_deciding_rank_times_the_accumulation():
    # The deciding rank: the largest micro-step floor (0.75 s, the second); a rank without one is left out.
    assert gate_measures.floor_terms(floor_plan()) == {
        "micro_step compute x 4(s)": 4 * 0.75,
        "micro_step collectives x 4(s)": 4 * 0.125,
        "micro_step memory x 4(s)": None,
        "boundary collectives(s)": 0.5,
        "optimizer cpu_adam(s)": 1.0,
    }
    assert gate_measures.floor_terms(floor_plan(boundary_terms={}, optimizer_terms={})) == {
        "micro_step compute x 4(s)": 3.0,
        "micro_step collectives x 4(s)": 0.5,
        "micro_step memory x 4(s)": None,
    }


def test_floor_terms_are_empty_without_a_ranks_floor_and_need_a_plan():
    # The plan of this machine, probed without measurements: no rank has a micro-step floor.
    planned = planned_run()
    assert planned.floor.ranks and all(r.micro_step_floor_s is None for r in planned.floor.ranks)
    assert gate_measures.floor_terms(planned) == {}
    assert gate_measures.floor_terms(floor_plan(ranks=[])) == {}
    assert (
        gate_measures.floor_terms(
            floor_plan(
                ranks=[FloorRank(rank=0, device="cpu", terms={"compute(s)": 1.0}, micro_step_floor_s=None)]
            )
        )
        == {}
    )
    # No plan, no floor and no terms: the gate is not measured.
    with pytest.raises(gate_measures.NotMeasured, match="no physical floor"):
        gate_measures.floor_ratio(synthetic_steps(steps=20), STEP_TIME, 5, None)
    # A plan whose floor lacks its accumulation is refused when it is read, naming the field.
    data = json.loads(json.dumps(floor_plan().as_json()))
    del data["floor"]["accumulation"]
    with pytest.raises(ContractError) as refused:
        Plan.parse(data, "plan/plan_measured.json")
    assert refused.value.key == "floor.accumulation"


def test_floor_ratio_evidence_carries_the_floor_terms():
    plan = floor_plan(optimizer_step_floor_s=0.25)
    ratio, evidence = gate_measures.floor_ratio(
        synthetic_steps(steps=20, step_time=0.5, noise=0.0), STEP_TIME, 5, plan
    )
    assert evidence.floor == 0.25 and evidence.floor_terms == gate_measures.floor_terms(plan) != {}
    assert ratio == evidence.median_step_time / 0.25


# ---- reproduction and the whole evaluation ---------------------------------------------------------


def test_faithfulness_reasons_exactly():
    deviation = Deviation(
        path="fp16.enabled",
        claim=True,
        rendered=False,
        kind="changed",
        reason="no fp16",
        changes_experiment=True,
    )
    harmless = deviation.model_copy(update={"path": "steps_per_print", "changes_experiment": False})
    assert gates.faithfulness(Deviations(deviations=[deviation, harmless]), CPU_FINGERPRINT) == Reproduction(
        faithful=False,
        reasons=[
            "fp16.enabled: True -> False (no fp16)",
            "hardware differs from the claim's RTX 5070 + RTX 4090: no GPU (CPU accelerator)",
        ],
    )
    none = Deviations(deviations=[])
    twins = gpu_fingerprint(("NVIDIA A100", 40), ("NVIDIA A100", 40))
    assert gates.faithfulness(none, twins) == Reproduction(
        faithful=False,
        reasons=["hardware differs from the claim's RTX 5070 + RTX 4090: NVIDIA A100, NVIDIA A100"],
    )
    three = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24), ("RTX 4090", 24))
    assert not gates.faithfulness(none, three).faithful


def test_evaluate_counts_the_ranks_of_the_run_specs_world_size():
    steps = synthetic_steps()
    step_gates = tuple(g for g in PROFILE.gates if g.name in ("optimizer_step_time", "zero_nonfinite"))
    none = Deviations(deviations=[])
    summary = train_summary(200)
    judged = judged_run(
        step_gates, steps, no_events(), summary, run_spec_for(200), none, CPU_FINGERPRINT, 5, RULE
    )
    assert [g.verdict for g in judged.gates] == [gates.PASS, gates.PASS]
    assert judged.reproduction == gates.faithfulness(none, CPU_FINGERPRINT)
    assert (judged.records.world_size, judged.records.expected_steps) == (2, 200)
    assert judged.records.steps_per_rank == {0: 200, 1: 200}
    # Without a summary (the run did not say how many ranks it had) the run spec still does.
    meta = run_metadata(steps, no_events(), summary, "", 200)
    from_meta = judged_run(
        step_gates[:1],
        steps,
        no_events(),
        None,
        run_spec_for(200),
        none,
        CPU_FINGERPRINT,
        5,
        RULE,
        run_meta=meta,
    )
    assert from_meta.gates[0].verdict == gates.PASS
    # A run spec of three ranks: rank 2 left no records, whatever the summary says.
    three = judged_run(
        step_gates,
        steps,
        no_events(),
        summary,
        run_spec_for(200, world_size=3),
        none,
        CPU_FINGERPRINT,
        5,
        RULE,
        run_meta=meta,
    )
    assert [g.verdict for g in three.gates] == [gates.NOT_MEASURED, gates.FAIL]
    assert "ranks with no step records: [2] of world size 3" in three.gates[1].reason


# ---- parse_run: several logs, node fingerprints, an undecodable byte ---------------------------------


def test_parse_run_over_two_node_logs_and_node_fingerprints(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    for rank in (0, 1):
        write_lines(metrics / f"rank{rank}.jsonl", [step_record(rank=rank, step=s, loss=1.0) for s in (1, 2)])
    for node in (10, 2, 0, 1):
        NodeFingerprint(node=node, machine=CPU_FINGERPRINT).write(metrics / f"node{node}.json")
    first, second = tmp_path / "node0.log", tmp_path / "node1.log"
    first.write_bytes(b"[Rank 0] step=2, skipped=0, lr=[1e-05]\nhalf a character: \xe2\x82")
    second.write_text(
        '[rank1]: Traceback (most recent call last):\n[rank1]:   File "x.py", line 1\n'
        "[rank1]: RuntimeError: boom\n"
        "[launch.py] --local_rank=3' exits with return code = 1\n"
    )
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("")
    steps, events, meta = parse_run(metrics, [first, second], train_summary(2), events_file, 2)
    assert [n.node for n in meta.nodes] == [0, 1, 2, 10]
    assert meta.failed_ranks == [1]  # DeepSpeed's exit line prints its last process started, not a rank
    exit_failure = next(f for f in meta.failures if f.kind == "rank_exit_error")
    assert exit_failure.exit_code == 1
    assert exit_failure.last_lines == [
        "[Rank 0] step=2, skipped=0, lr=[1e-05]",
        "half a character: \ufffd",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "x.py", line 1',
        "[rank1]: RuntimeError: boom",
        "[launch.py] --local_rank=3' exits with return code = 1",
    ]
    assert list(events.index) == list(range(len(events)))
    write_lines(events_file, [StabiliserEvent(step=2, rank=0, kind="loss_spike", value=9.0, action="skip")])
    _, with_stabiliser, _ = parse_run(metrics, first, train_summary(2), events_file, 2)
    assert list(with_stabiliser.index) == list(range(len(with_stabiliser)))
    assert with_stabiliser["kind"].tolist() == ["ds_progress", "stabiliser"]


def test_rank_metrics_table_has_no_index_column(tmp_path):
    write_lines(tmp_path / "rank1.jsonl", [step_record(rank=1, step=1, loss=2.0)])
    write_lines(
        tmp_path / "rank0.jsonl",
        [step_record(rank=0, step=2, loss=1.0), step_record(rank=0, step=1, loss=1.5)],
    )
    steps = read_rank_metrics(tmp_path)
    assert list(steps.columns) == list(STEP_COLUMNS) and list(steps.index) == [
        0,
        1,
        2,
    ]  # the records' keys only
    assert steps[["rank", "step"]].values.tolist() == [[0, 1], [0, 2], [1, 1]]
    assert steps["loss"].tolist() == [1.5, 1.0, 2.0]
