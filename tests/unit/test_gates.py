"""The gates on synthetic runs (tests.unit.helpers.synthetic_steps: 2 ranks, 200 steps unless said), judged
with the cpu-tiny profile's gates, its run spec, rendered DeepSpeed config and plan, as check_gates judges."""

import json

import numpy as np
import pytest

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import (
    claim_box,
    judged_gate,
    judged_run,
    no_events,
    planned_run,
    rendered_run,
    run_spec_for,
    settings,
    step_record,
    synthetic_steps,
    table_of,
    train_summary,
    with_optimizer_step_floor,
)
from zerogate.analysis import measures
from zerogate.analysis.columns import DEVICE_PEAK, STEP_TIME
from zerogate.analysis.gate_measures import smallest_device_ranks, to_gate_unit, unit_of
from zerogate.analysis.gates import faithfulness
from zerogate.analysis.parse import parse_launcher_log, run_metadata, stabiliser_events
from zerogate.contracts.base import write_lines
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import StabiliserEvent
from zerogate.contracts.run import Deviations, DsConfig
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import (
    FAIL,
    INCONCLUSIVE,
    NOT_MEASURED,
    PASS,
    NonfiniteEventEvidence,
    OverflowEvidence,
    ProgressLineEvidence,
)

PROFILE = settings("cpu-tiny")
RULE = SpikeRule.from_settings(PROFILE.stabiliser)  # the spike rule as train/settings.json carries it
CLAIM_BOX = claim_box()


# ---- the run's real inputs, built by their producers ----------------------------------------------------


def _fp16() -> DsConfig:
    return rendered_run("claim box")[0]


def _fp32() -> DsConfig:
    return rendered_run("cpu")[0]


SUMMARY = train_summary()


def gate(name):
    return next(g for g in PROFILE.gates if g.name == name)


def judge(
    name,
    steps,
    events=None,
    summary=SUMMARY,
    fingerprint=CPU_FINGERPRINT,
    expected=200,
    world_size=2,
    ds_config="fp16",
    run_meta=None,
    plan=None,
):
    config = {"fp16": _fp16, "fp32": _fp32}[ds_config]() if isinstance(ds_config, str) else ds_config
    return judged_gate(
        gate(name),
        steps,
        no_events() if events is None else events,
        summary,
        fingerprint,
        5,
        expected,
        RULE,
        plan,
        run_meta,
        world_size=world_size,
        ds_config=config,
    )


def fp16(steps):
    """Records as zerogate.train.loop writes them under fp16: a loss scale, and a skip reason per step."""
    return steps.assign(loss_scale=65536.0, skip_reason=None, update_applied=True)


# ---- the gates ---------------------------------------------------------------------------------------


def test_step_time_gate_passes_and_fails_on_the_median():
    assert judge("optimizer_step_time", synthetic_steps(step_time=0.5)).verdict == PASS
    slow = judge("optimizer_step_time", synthetic_steps(step_time=2.5))
    assert slow.verdict == FAIL and slow.measured == pytest.approx(2.5, rel=0.05)
    assert slow.evidence.p90 is not None and slow.evidence.metric_unit == "s"
    assert set(slow.evidence.per_rank) == {0, 1}


def test_warmup_steps_do_not_count_for_time():
    steps = synthetic_steps(step_time=0.5)
    steps.loc[steps["step"] <= 5, STEP_TIME] = 100.0
    assert judge("optimizer_step_time", steps).measured < 1.0


def test_memory_gate_converts_gib_to_the_claims_gb():
    # 7.0 GiB = 7.52 GB: under 7.42 if GB meant GiB, over it in the gate's stated decimal GB.
    result = judge("peak_memory_smallest_device", synthetic_steps(memory_gib=7.0))
    assert result.verdict == FAIL
    assert result.measured == pytest.approx(7.01 * 1024**3 / 1e9, rel=1e-6)
    assert judge("peak_memory_smallest_device", synthetic_steps(memory_gib=6.5)).verdict == PASS


def test_memory_gate_judges_the_smallest_gpu():
    steps = synthetic_steps(memory_gib=7.6)
    steps.loc[steps["rank"] == 0, DEVICE_PEAK] = 6.0  # rank 0 on the small card
    fingerprint = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))
    result = judge("peak_memory_smallest_device", steps, fingerprint=fingerprint)
    assert (
        result.verdict == PASS
        and list(result.evidence.per_rank) == [0]
        and result.evidence.metric_unit == "GiB"
    )
    assert "RTX 5070" in result.evidence.device_selection


def test_missing_metric_is_not_measured_never_pass():
    # The steps table has every StepRecord column (parse.steps_table): a metric the run did not record is a
    # column without a value.
    steps = synthetic_steps().assign(**{DEVICE_PEAK: np.nan})
    result = judge("peak_memory_smallest_device", steps)
    assert result.verdict == NOT_MEASURED and result.measured is None and result.evidence is None
    assert DEVICE_PEAK in result.reason
    steps = synthetic_steps()
    steps[STEP_TIME] = np.nan
    assert judge("optimizer_step_time", steps).verdict == NOT_MEASURED


def test_loss_convergence_needs_drop_and_ratio():
    falling = judge("loss_convergence", synthetic_steps(loss_start=5, loss_end=1))
    assert falling.verdict == PASS and falling.measured == pytest.approx(0.23, abs=0.05)
    flat = judge("loss_convergence", synthetic_steps(loss_start=3, loss_end=3, noise=0.3))
    assert flat.verdict == FAIL
    rising = judge("loss_convergence", synthetic_steps(loss_start=2, loss_end=4))
    assert rising.verdict == FAIL and "is not <= 0.9" in rising.reason


def test_loss_convergence_does_not_demand_per_step_monotonicity():
    steps = synthetic_steps(loss_start=5, loss_end=1, noise=0.4)
    assert (np.diff(steps[steps["rank"] == 0]["loss"]) > 0).any()
    assert judge("loss_convergence", steps).verdict == PASS


def test_loss_spikes_are_counted():
    steps = synthetic_steps(loss_start=3, loss_end=2.5, noise=0.01)
    steps.loc[steps["step"] == 150, "loss"] += 5.0
    assert judge("loss_convergence", steps).evidence.spikes == 1


def test_a_nan_fails_the_nonfinite_gate():
    steps = synthetic_steps()
    assert judge("zero_nonfinite", steps).verdict == PASS
    steps.loc[(steps["step"] == 50) & (steps["rank"] == 1), "grad_norm"] = float("inf")
    steps.loc[(steps["step"] == 60) & (steps["rank"] == 0), "loss"] = float("nan")
    result = judge("zero_nonfinite", steps)
    assert result.verdict == FAIL and result.measured == 2


def test_fatal_loss_scale_and_crashes_fail_the_nonfinite_gate():
    events = parse_launcher_log(
        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n"
    )
    assert judge("zero_nonfinite", synthetic_steps(), events=events).verdict == FAIL
    crash = parse_launcher_log(
        '[rank1]: Traceback (most recent call last):\n[rank1]:   File "x.py", line 1\n'
        "[rank1]: RuntimeError: boom\n"
    )
    result = judge("zero_nonfinite", synthetic_steps(), events=crash)
    assert result.verdict == FAIL and "rank 1 failed: RuntimeError: boom" in result.reason


def stabiliser_log(tmp_path, *events):
    """train/events.jsonl as the loss stabiliser writes it, read as parse_logs reads it."""
    path = tmp_path / "events.jsonl"
    write_lines(path, [StabiliserEvent(**e) for e in events])
    return stabiliser_events(path)


def test_a_nan_the_stabiliser_rolled_back_still_fails_the_nonfinite_gate(tmp_path):
    # Rollback restored the step records of the last good checkpoint: only the event tells of the NaN.
    events = stabiliser_log(
        tmp_path,
        {"step": 12, "rank": 1, "kind": "nonfinite_loss", "value": "nan", "action": "rollback", "detail": ""},
    )
    result = judge("zero_nonfinite", synthetic_steps(), events=events)
    assert result.verdict == FAIL and result.measured == 1
    assert result.evidence.nonfinite_events[0].sources == ["loss stabiliser"]


def test_a_skipped_nan_is_counted_once_and_spikes_are_not_nonfinite(tmp_path):
    steps = synthetic_steps()
    steps.loc[steps["step"] == 30, "loss"] = float("nan")  # skip keeps the bad step's record, on both ranks
    events = stabiliser_log(
        tmp_path,
        {"step": 30, "rank": 1, "kind": "nonfinite_loss", "value": "nan", "action": "skip", "detail": ""},
        {"step": 90, "rank": 0, "kind": "loss_spike", "value": 9.5, "action": "skip", "detail": ""},
    )
    result = judge("zero_nonfinite", steps, events=events)
    # One fault per optimizer step, not one per rank's record of it.
    assert result.measured == 1
    assert result.evidence.nonfinite_events == [
        NonfiniteEventEvidence(
            step=30, ranks=[0, 1], metrics=["loss"], sources=["loss stabiliser", "step records"]
        )
    ]
    assert judge("zero_nonfinite", synthetic_steps(), events=stabiliser_log(tmp_path)).verdict == PASS


def test_incomplete_run_fails_the_nonfinite_gate():
    steps = synthetic_steps()
    steps = steps[~((steps["rank"] == 1) & (steps["step"] > 150))]
    result = judge("zero_nonfinite", steps, summary=None)
    assert result.verdict == FAIL and "stopped early" in result.reason and "did not finish" in result.reason


def test_cpu_run_is_not_a_faithful_reproduction():
    # On the CPU the rendered config turns the claim's fp16 off (a deviation that changes the experiment),
    # and the hardware is not the claim's: two reasons.
    _, cpu_deviations, _ = rendered_run("cpu")
    assert [d.path for d in cpu_deviations.changing_the_experiment] == ["fp16.enabled"]
    verdict = faithfulness(cpu_deviations, CPU_FINGERPRINT)
    assert not verdict.faithful and len(verdict.reasons) == 2
    claim_box = gpu_fingerprint(("NVIDIA GeForce RTX 5070", 12), ("NVIDIA GeForce RTX 4090", 24))
    assert faithfulness(Deviations(deviations=[]), claim_box).faithful
    assert faithfulness(
        rendered_run("claim box")[1], claim_box
    ).faithful  # the claim's config, unchanged there


def test_evaluate_counts_verdicts():
    spec = run_spec_for(200)
    _, deviations, _ = rendered_run("cpu")
    steps = fp16(synthetic_steps())
    meta = run_metadata(steps, no_events(), SUMMARY, "", 200)
    result = judged_run(
        PROFILE.gates,
        steps,
        no_events(),
        SUMMARY,
        spec,
        deviations,
        CPU_FINGERPRINT,
        5,
        RULE,
        plan=with_optimizer_step_floor(planned_run(), 0.25),
        run_meta=meta,
        ds_config=_fp16(),
    )
    assert result.counts == {PASS: len(PROFILE.gates), FAIL: 0, INCONCLUSIVE: 0, NOT_MEASURED: 0}
    # Without the planner's floor, fp16 skip records and run metadata, those gates are not measured.
    bare = judged_run(
        PROFILE.gates, synthetic_steps(), no_events(), SUMMARY, spec, deviations, CPU_FINGERPRINT, 5, RULE
    )
    assert {g.name for g in bare.gates if g.verdict == NOT_MEASURED} == {
        "step_time_over_physical_floor",
        "overflow_skip_fraction",
        "ranks_completed",
    }
    assert [g.name for g in result.gates] == [g.name for g in PROFILE.gates]


def test_overflow_skipped_steps_are_excluded_from_timing_and_counted():
    steps = fp16(synthetic_steps(step_time=1.0))
    # Skipped steps do no update: fast. 40 % of them would pull the median down if they counted.
    fast = steps["step"].between(20, 100)
    steps.loc[fast, STEP_TIME] = 0.1
    steps.loc[fast, "skip_reason"] = "fp16_overflow"
    steps.loc[fast, "update_applied"] = False
    result = judge("optimizer_step_time", steps)
    assert result.measured == pytest.approx(1.0, rel=0.05)
    assert result.evidence.overflow_skipped_steps_excluded == 81
    fraction = judge("overflow_skip_fraction", steps)
    assert fraction.verdict == FAIL and fraction.measured == pytest.approx(81 / 200)


def test_deepspeeds_progress_line_is_evidence_never_the_skip_statistic():
    # DeepSpeed's skipped= also counts the updates the loss stabiliser dropped: one source, the records.
    text = "[Rank 0] step=200, skipped=4, lr=[1e-05], mom=[(0.9, 0.999)]\n"
    events = parse_launcher_log(text)
    meta = run_metadata(synthetic_steps(), events, SUMMARY, text, 200)
    fp32 = judge("overflow_skip_fraction", synthetic_steps(), events=events, run_meta=meta, ds_config="fp32")
    assert fp32.verdict == NOT_MEASURED and "no fp16 loss scaler" in fp32.reason
    steps = fp16(synthetic_steps())
    steps.loc[steps["step"] == 7, "skip_reason"] = "fp16_overflow"
    steps.loc[steps["step"] == 9, "skip_reason"] = "loss_spike"  # the stabiliser's, not fp16's
    result = judge("overflow_skip_fraction", steps, events=events, run_meta=meta)
    assert result.measured == pytest.approx(1 / 200) and result.evidence.skipped_per_rank == {0: 1, 1: 1}
    assert result.evidence.deepspeed_progress_line.skipped == 4


def test_floor_ratio_needs_the_planners_floor():
    steps = synthetic_steps(step_time=0.5)
    absent = judge("step_time_over_physical_floor", steps, plan=None)
    assert absent.verdict == NOT_MEASURED and "plan" in absent.reason
    honest = judge("step_time_over_physical_floor", steps, plan=with_optimizer_step_floor(planned_run(), 0.2))
    assert honest.verdict == PASS and honest.measured == pytest.approx(2.5, rel=0.05)
    # Faster than physics: the measurement (or the floor) is wrong.
    impossible = judge(
        "step_time_over_physical_floor", steps, plan=with_optimizer_step_floor(planned_run(), 1.0)
    )
    assert impossible.verdict == FAIL and "is above the measured step" in impossible.reason


def test_memory_gate_over_all_ranks_takes_the_worst_rank():
    steps = synthetic_steps(memory_gib=3.0)
    steps.loc[steps["rank"] == 1, DEVICE_PEAK] = 23.0  # 24.7 GB: over the 24 GB card
    fingerprint = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))
    result = judge("peak_memory_per_rank", steps, fingerprint=fingerprint)
    assert (
        result.verdict == FAIL
        and set(result.evidence.per_rank) == {0, 1}
        and result.evidence.metric_unit == "GiB"
    )
    assert result.evidence.worst_rank == 1


def test_ranks_completed_without_run_metadata_is_not_measured():
    assert judge("ranks_completed", synthetic_steps()).verdict == NOT_MEASURED


def test_overflow_gate_reasons_and_evidence_exactly():
    steps = fp16(synthetic_steps())

    def reason(ds_config, records=steps):
        return judge("overflow_skip_fraction", records, ds_config=ds_config).reason

    assert reason(None) == "no rendered DeepSpeed config: whether the run had a loss scaler is unknown"
    assert reason("fp32") == "the rendered DeepSpeed config has no fp16 loss scaler: nothing for it to skip"
    assert (
        reason("fp16", synthetic_steps())
        == "fp16 is on but the step records hold no loss scale or skip reason to count from"
    )
    text = "[Rank 0] step=200, skipped=3, lr=[1e-05]\n"
    meta = run_metadata(steps, parse_launcher_log(text), SUMMARY, text, 200)
    result = judge("overflow_skip_fraction", steps, run_meta=meta)
    assert result.verdict == PASS and result.evidence == OverflowEvidence(
        source="per-step records (skip_reason)",
        skip_fraction_per_rank={0: 0.0, 1: 0.0},
        skipped_per_rank={0: 0, 1: 0},
        deepspeed_progress_line=ProgressLineEvidence(
            at_step=200,
            skipped=3,
            note="DeepSpeed's count also includes the updates the loss stabiliser dropped; not the statistic",
        ),
    )
    # As gates/verdicts.json holds it: every key with its unit.
    assert result.evidence.model_dump(by_alias=True) == {
        "kind": "overflow_skip_fraction",
        "source": "per-step records (skip_reason)",
        "skip_fraction_per_rank(ratio)": {0: 0.0, 1: 0.0},
        "skipped_per_rank(steps)": {0: 0, 1: 0},
        "deepspeed_progress_line": {
            "at_step(step)": 200,
            "skipped(steps)": 3,
            "note": "DeepSpeed's count also includes the updates the loss stabiliser dropped; "
            "not the statistic",
        },
    }


def test_overflow_skips_of_no_records_are_zero():
    empty = table_of([])
    assert measures.overflow_skips(empty) is None  # no loss scale recorded: no scaler
    one = table_of(
        [
            step_record(step=1, loss_scale=1.0),
            step_record(step=2, loss_scale=1.0, skip_reason="fp16_overflow"),
        ]
    )
    skips = measures.overflow_skips(one)
    assert (skips.per_rank, skips.fraction_per_rank, skips.worst_count, skips.worst_fraction) == (
        {0: 1},
        {0: 0.5},
        1,
        0.5,
    )
    nothing = measures.overflow_skips(one.iloc[:0].assign(loss_scale=[]))
    assert nothing is None
    assert measures.OverflowSkips({}, {}, 0, 0.0) == measures.OverflowSkips(
        *({}, {}, max({}.values(), default=0), max({}.values(), default=0.0))
    )
    assert measures.overflow_skipped_count(one, 1) == 1 and measures.overflow_skipped_count(one, 0) == 1
    assert measures.overflow_skipped_count(one.assign(skip_reason=None), 1) == 0
    assert measures.overflow_skipped_count(one.assign(loss_scale=None), 0) is None


def test_floor_gate_reasons_and_evidence_exactly():
    steps = synthetic_steps(step_time=0.5)

    def judged(plan):
        return judge("step_time_over_physical_floor", steps, plan=plan)

    assert judged(None).reason == "no physical floor: the planner's plan.json is absent or gives none"
    assert (
        judged(with_optimizer_step_floor(planned_run(), 0.0)).reason
        == "the planner's floor is 0.0 s, not a positive time"
    )
    assert judged(with_optimizer_step_floor(planned_run(), -1.0)).verdict == NOT_MEASURED
    result = judged(with_optimizer_step_floor(planned_run(), 0.25))
    assert set(result.evidence.model_dump(by_alias=True)) == {
        "kind",
        "per_rank(s)",
        "worst_rank(rank)",
        "median_step_time(s)",
        "floor(s)",
        "warmup_steps_excluded(steps)",
        "floor_terms(s)",
        "median_step_time_per_repeat(s)",
    }
    assert result.evidence.per_repeat is None  # one run: no repeats to list
    assert result.evidence.floor == 0.25 and result.evidence.warmup_steps_excluded == 5
    assert (
        unit_of("step_time(s)") == "(s)"
        and unit_of("memory/device_peak(GiB)") == "(GiB)"
        and unit_of("loss") == ""
    )
    assert unit_of("a(b)c") == ""


def test_the_floor_gate_reads_the_plans_optimizer_step_floor():
    """The floor is the plan's ``floor.optimizer_step_floor(s)`` and nothing else: a plan whose floor gives no
    optimizer-step figure (this CPU machine, probed without measurements) is no floor, whatever else it
    holds."""
    planned = planned_run()
    assert (
        planned.floor.optimizer_step_floor_s is None and planned.floor.missing
    )  # the planner says what it lacks
    steps = synthetic_steps(step_time=0.5)
    assert (
        judge("step_time_over_physical_floor", steps, plan=planned).reason
        == "no physical floor: the planner's plan.json is absent or gives none"
    )
    micro_only = planned.model_copy(
        update={"floor": planned.floor.model_copy(update={"micro_step_floor_s": 0.1})}
    )
    assert judge("step_time_over_physical_floor", steps, plan=micro_only).verdict == NOT_MEASURED
    two = judge("step_time_over_physical_floor", steps, plan=with_optimizer_step_floor(planned_run(), 2))
    assert two.evidence.floor == 2.0 and two.measured == pytest.approx(two.evidence.median_step_time / 2.0)
    # As plan.json holds it: the figure sits under the floor, and the plan read back gives the same verdict.
    assert with_optimizer_step_floor(planned_run(), 2).as_json()["floor"]["optimizer_step_floor(s)"] == 2
    read_back = Plan.parse(
        json.loads(json.dumps(with_optimizer_step_floor(planned_run(), 0.25).as_json())),
        "plan/plan_measured.json",
    )
    assert judge("step_time_over_physical_floor", steps, plan=read_back) == judge(
        "step_time_over_physical_floor", steps, plan=with_optimizer_step_floor(planned_run(), 0.25)
    )


def test_smallest_device_selection_exactly():
    steps = synthetic_steps(ranks=3)
    assert smallest_device_ranks(steps, CPU_FINGERPRINT) == (
        [0, 1, 2],
        "CPU accelerator: all ranks share host memory",
    )
    no_devices = gpu_fingerprint()
    assert smallest_device_ranks(steps, no_devices)[0] == [0, 1, 2]
    data = gpu_fingerprint(("A", 8)).model_dump()
    data["accelerator"]["kind"] = "cpu"
    cpu_with_devices = Fingerprint.of(data, "the test fingerprint")
    assert smallest_device_ranks(steps, cpu_with_devices)[0] == [0, 1, 2]
    two = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))  # rank 2 has no device of its own: left out
    assert smallest_device_ranks(steps, two) == ([0], "smallest device: RTX 5070 (12.00 GiB)")
    twins = gpu_fingerprint(("B", 8), ("A", 8), ("C", 9))
    assert smallest_device_ranks(steps, twins) == ([0, 1], "smallest device: A, B (8.00 GiB)")


def test_convergence_needs_twice_the_initial_steps():
    assert gate("loss_convergence").convergence.initial_steps == 3

    def judged(steps, n):
        return judged_gate(
            gate("loss_convergence"),
            steps,
            no_events(),
            train_summary(n),
            CPU_FINGERPRINT,
            0,
            n,
            RULE,
            world_size=2,
        )

    assert judged(synthetic_steps(steps=5), 5).reason == "only 5 loss values: too few to tell a trend"
    assert judged(synthetic_steps(steps=6), 6).verdict != NOT_MEASURED
    steps = synthetic_steps(steps=5)
    steps.loc[steps["step"] == 2, "loss"] = float("nan")
    broken = judged(steps, 5)
    assert broken.verdict == FAIL and broken.reason == "non-finite loss at 1 steps (2)"


def test_memory_gate_gives_per_rank_values_in_the_gates_unit():
    result = judge("peak_memory_per_rank", synthetic_steps(memory_gib=1.0))
    assert result.unit == "GB" and result.evidence.metric_unit == "GiB"
    assert result.evidence.per_rank_in_gate_unit == {
        0: pytest.approx(1.0 * 1024**3 / 1e9),
        1: pytest.approx(1.01 * 1024**3 / 1e9),
    }
    assert result.evidence.per_rank == {0: pytest.approx(1.0), 1: pytest.approx(1.01)}
    assert (
        to_gate_unit(1.0, "memory/device_peak(GiB)", "GiB") == 1.0
        and to_gate_unit(1.0, "step_time(s)", "GB") == 1.0
    )
