import copy
import json

import numpy as np
import pytest

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import no_events, spike_rule, synthetic_steps
from zerogate.analysis.gates import FAIL, NOT_MEASURED, PASS, evaluate, evaluate_gate, faithfulness
from zerogate.analysis.parse import parse_launcher_log, run_metadata, stabiliser_events

SUMMARY = {"completed_steps": 200, "world_size": 2}
FP16_CONFIG = {"fp16": {"enabled": True, "loss_scale": 0}}


def gate(tiny_profile, name):
    return next(g for g in tiny_profile["gates"] if g["name"] == name)


def judge(tiny_profile, name, steps, events=None, summary=SUMMARY, fingerprint=CPU_FINGERPRINT, expected=200,
          world_size=2, ds_config=FP16_CONFIG, run_meta=None):
    return evaluate_gate(gate(tiny_profile, name), steps, no_events() if events is None else events, summary,
                         fingerprint, 5, expected, spike_rule(tiny_profile), run_meta=run_meta,
                         world_size=world_size, ds_config=ds_config)


def test_step_time_gate_passes_and_fails_on_the_median(tiny_profile):
    assert judge(tiny_profile, "optimizer_step_time", synthetic_steps(step_time=0.5))["verdict"] == PASS
    slow = judge(tiny_profile, "optimizer_step_time", synthetic_steps(step_time=2.5))
    assert slow["verdict"] == FAIL and slow["measured"] == pytest.approx(2.5, rel=0.05)
    assert "p90(s)" in slow["evidence"] and set(slow["evidence"]["per_rank(s)"]) == {0, 1}


def test_warmup_steps_do_not_count_for_time(tiny_profile):
    steps = synthetic_steps(step_time=0.5)
    steps.loc[steps["step"] <= 5, "step_time(s)"] = 100.0
    assert judge(tiny_profile, "optimizer_step_time", steps)["measured"] < 1.0


def test_memory_gate_converts_gib_to_the_claims_gb(tiny_profile):
    # 7.0 GiB = 7.52 GB: under 7.42 if GB meant GiB, over it in the gate's stated decimal GB.
    result = judge(tiny_profile, "peak_memory_smallest_device", synthetic_steps(memory_gib=7.0))
    assert result["verdict"] == FAIL
    assert result["measured"] == pytest.approx(7.01 * 1024**3 / 1e9, rel=1e-6)
    assert judge(tiny_profile, "peak_memory_smallest_device", synthetic_steps(memory_gib=6.5))["verdict"] == PASS


def test_memory_gate_judges_the_smallest_gpu(tiny_profile):
    steps = synthetic_steps(memory_gib=7.6)
    steps.loc[steps["rank"] == 0, "memory/device_peak(GiB)"] = 6.0  # rank 0 on the small card
    fingerprint = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))
    result = judge(tiny_profile, "peak_memory_smallest_device", steps, fingerprint=fingerprint)
    assert result["verdict"] == PASS and list(result["evidence"]["per_rank(GiB)"]) == [0]
    assert "RTX 5070" in result["evidence"]["device_selection"]


def test_missing_metric_is_not_measured_never_pass(tiny_profile):
    steps = synthetic_steps().drop(columns=["memory/device_peak(GiB)"])
    result = judge(tiny_profile, "peak_memory_smallest_device", steps)
    assert result["verdict"] == NOT_MEASURED and result["measured"] is None
    assert "memory/device_peak(GiB)" in result["reason"]
    steps = synthetic_steps()
    steps["step_time(s)"] = np.nan
    assert judge(tiny_profile, "optimizer_step_time", steps)["verdict"] == NOT_MEASURED


def test_loss_convergence_needs_drop_and_ratio(tiny_profile):
    falling = judge(tiny_profile, "loss_convergence", synthetic_steps(loss_start=5, loss_end=1))
    assert falling["verdict"] == PASS and falling["measured"] == pytest.approx(0.23, abs=0.05)
    flat = judge(tiny_profile, "loss_convergence", synthetic_steps(loss_start=3, loss_end=3, noise=0.3))
    assert flat["verdict"] == FAIL
    rising = judge(tiny_profile, "loss_convergence", synthetic_steps(loss_start=2, loss_end=4))
    assert rising["verdict"] == FAIL and "is not <= 0.9" in rising["reason"]


def test_loss_convergence_does_not_demand_per_step_monotonicity(tiny_profile):
    steps = synthetic_steps(loss_start=5, loss_end=1, noise=0.4)
    assert (np.diff(steps[steps["rank"] == 0]["loss"]) > 0).any()
    assert judge(tiny_profile, "loss_convergence", steps)["verdict"] == PASS


def test_loss_spikes_are_counted(tiny_profile):
    steps = synthetic_steps(loss_start=3, loss_end=2.5, noise=0.01)
    steps.loc[steps["step"] == 150, "loss"] += 5.0
    assert judge(tiny_profile, "loss_convergence", steps)["evidence"]["spikes(count)"] == 1


def test_a_nan_fails_the_nonfinite_gate(tiny_profile):
    steps = synthetic_steps()
    assert judge(tiny_profile, "zero_nonfinite", steps)["verdict"] == PASS
    steps.loc[(steps["step"] == 50) & (steps["rank"] == 1), "grad_norm"] = float("inf")
    steps.loc[(steps["step"] == 60) & (steps["rank"] == 0), "loss"] = float("nan")
    result = judge(tiny_profile, "zero_nonfinite", steps)
    assert result["verdict"] == FAIL and result["measured"] == 2


def test_fatal_loss_scale_and_crashes_fail_the_nonfinite_gate(tiny_profile):
    events = parse_launcher_log("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n")
    assert judge(tiny_profile, "zero_nonfinite", synthetic_steps(), events=events)["verdict"] == FAIL
    crash = parse_launcher_log("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"x.py\", line 1\n"
                               "[rank1]: RuntimeError: boom\n")
    result = judge(tiny_profile, "zero_nonfinite", synthetic_steps(), events=crash)
    assert result["verdict"] == FAIL and "rank 1 failed: RuntimeError: boom" in result["reason"]


def stabiliser_log(tmp_path, *events):
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return stabiliser_events(path)


def test_a_nan_the_stabiliser_rolled_back_still_fails_the_nonfinite_gate(tmp_path, tiny_profile):
    # Rollback restored the step records of the last good checkpoint: only the event tells of the NaN.
    events = stabiliser_log(tmp_path, {"step": 12, "rank": 1, "kind": "nonfinite_loss", "value": "nan",
                                       "action": "rollback", "detail": ""})
    result = judge(tiny_profile, "zero_nonfinite", synthetic_steps(), events=events)
    assert result["verdict"] == FAIL and result["measured"] == 1
    assert result["evidence"]["nonfinite_events"][0]["sources"] == ["loss stabiliser"]


def test_a_skipped_nan_is_counted_once_and_spikes_are_not_nonfinite(tmp_path, tiny_profile):
    steps = synthetic_steps()
    steps.loc[steps["step"] == 30, "loss"] = float("nan")  # skip keeps the bad step's record, on both ranks
    events = stabiliser_log(
        tmp_path,
        {"step": 30, "rank": 1, "kind": "nonfinite_loss", "value": "nan", "action": "skip", "detail": ""},
        {"step": 90, "rank": 0, "kind": "loss_spike", "value": 9.5, "action": "skip", "detail": ""},
    )
    result = judge(tiny_profile, "zero_nonfinite", steps, events=events)
    # Finding 5: one fault per optimizer step (this assertion said 2 before: one per rank's record).
    assert result["measured"] == 1
    assert result["evidence"]["nonfinite_events"] == [
        {"step(step)": 30, "ranks(rank)": [0, 1], "metrics": ["loss"], "sources": ["loss stabiliser", "step records"]}]
    assert judge(tiny_profile, "zero_nonfinite", synthetic_steps(), events=stabiliser_log(tmp_path))["verdict"] == PASS


def test_incomplete_run_fails_the_nonfinite_gate(tiny_profile):
    steps = synthetic_steps()
    steps = steps[~((steps["rank"] == 1) & (steps["step"] > 150))]
    result = judge(tiny_profile, "zero_nonfinite", steps, summary=None)
    assert result["verdict"] == FAIL and "stopped early" in result["reason"] and "did not finish" in result["reason"]


def test_cpu_run_is_not_a_faithful_reproduction(claim_config):
    fp16 = {"path": "fp16.enabled", "claim": True, "rendered": False, "reason": "no fp16", "changes_experiment": True}
    verdict = faithfulness([fp16], CPU_FINGERPRINT)
    assert not verdict["faithful"] and len(verdict["reasons"]) == 2
    claim_box = gpu_fingerprint(("NVIDIA GeForce RTX 5070", 12), ("NVIDIA GeForce RTX 4090", 24))
    assert faithfulness([], claim_box)["faithful"]


def test_evaluate_counts_verdicts(tiny_profile):
    spec = {"training": {"optimizer_steps": 200}}
    steps = fp16(synthetic_steps())
    meta = run_metadata(steps, no_events(), SUMMARY, "", 200)
    result = evaluate(tiny_profile["gates"], steps, no_events(), SUMMARY, spec, [], CPU_FINGERPRINT, 5,
                      spike_rule(tiny_profile), plan={"floor": {"optimizer_step(s)": 0.25}}, run_meta=meta,
                      ds_config=FP16_CONFIG)
    assert result["counts"] == {PASS: len(tiny_profile["gates"]), FAIL: 0, NOT_MEASURED: 0}
    # Without the planner's floor, fp16 skip records and run metadata, those gates are not measured.
    bare = evaluate(tiny_profile["gates"], synthetic_steps(), no_events(), SUMMARY, spec, [], CPU_FINGERPRINT, 5,
                    spike_rule(tiny_profile))
    assert {g["name"] for g in bare["gates"] if g["verdict"] == NOT_MEASURED} == {
        "step_time_over_physical_floor", "overflow_skip_fraction", "ranks_completed"}
    assert [g["name"] for g in result["gates"]] == [g["name"] for g in tiny_profile["gates"]]


def fp16(steps):
    """Records as zerogate.train.loop writes them under fp16: a loss scale, and a skip reason per step."""
    return steps.assign(loss_scale=65536.0, skip_reason=None, update_applied=True)


def test_overflow_skipped_steps_are_excluded_from_timing_and_counted(tiny_profile):
    steps = fp16(synthetic_steps(step_time=1.0))
    # Skipped steps do no update: fast. 40 % of them would pull the median down if they counted.
    fast = steps["step"].between(20, 100)
    steps.loc[fast, "step_time(s)"] = 0.1
    steps.loc[fast, "skip_reason"] = "fp16_overflow"
    steps.loc[fast, "update_applied"] = False
    result = judge(tiny_profile, "optimizer_step_time", steps)
    assert result["measured"] == pytest.approx(1.0, rel=0.05)
    assert result["evidence"]["overflow_skipped_steps_excluded(steps)"] == 81
    fraction = judge(tiny_profile, "overflow_skip_fraction", steps)
    assert fraction["verdict"] == FAIL and fraction["measured"] == pytest.approx(81 / 200)


def test_deepspeeds_progress_line_is_evidence_never_the_skip_statistic(tiny_profile):
    # DeepSpeed's skipped= also counts the updates the loss stabiliser dropped: one source, the records.
    text = "[Rank 0] step=200, skipped=4, lr=[1e-05], mom=[(0.9, 0.999)]\n"
    events = parse_launcher_log(text)
    meta = run_metadata(synthetic_steps(), events, SUMMARY, text, 200)
    g = gate(tiny_profile, "overflow_skip_fraction")
    fp32 = evaluate_gate(g, synthetic_steps(), events, SUMMARY, CPU_FINGERPRINT, 5, 200, spike_rule(tiny_profile),
                         run_meta=meta, ds_config={"fp16": {"enabled": False}})
    assert fp32["verdict"] == NOT_MEASURED and "no fp16 loss scaler" in fp32["reason"]
    steps = fp16(synthetic_steps())
    steps.loc[steps["step"] == 7, "skip_reason"] = "fp16_overflow"
    steps.loc[steps["step"] == 9, "skip_reason"] = "loss_spike"  # the stabiliser's, not fp16's
    result = evaluate_gate(g, steps, events, SUMMARY, CPU_FINGERPRINT, 5, 200, spike_rule(tiny_profile), run_meta=meta,
                           ds_config=FP16_CONFIG)
    assert result["measured"] == pytest.approx(1 / 200) and result["evidence"]["skipped_per_rank(steps)"] == {0: 1, 1: 1}
    assert result["evidence"]["deepspeed_progress_line"]["skipped(steps)"] == 4


def test_floor_ratio_needs_the_planners_floor(tiny_profile):
    steps = synthetic_steps(step_time=0.5)
    g = gate(tiny_profile, "step_time_over_physical_floor")
    rule = spike_rule(tiny_profile)
    absent = evaluate_gate(g, steps, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, plan=None)
    assert absent["verdict"] == NOT_MEASURED and "plan" in absent["reason"]
    honest = evaluate_gate(g, steps, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, plan={"floor": {"optimizer_step(s)": 0.2}})
    assert honest["verdict"] == PASS and honest["measured"] == pytest.approx(2.5, rel=0.05)
    # Faster than physics: the measurement (or the floor) is wrong.
    impossible = evaluate_gate(g, steps, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, plan={"optimizer_step_floor(s)": 1.0})
    assert impossible["verdict"] == FAIL


def test_memory_gate_over_all_ranks_takes_the_worst_rank(tiny_profile):
    steps = synthetic_steps(memory_gib=3.0)
    steps.loc[steps["rank"] == 1, "memory/device_peak(GiB)"] = 23.0  # 24.7 GB: over the 24 GB card
    fingerprint = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))
    result = judge(tiny_profile, "peak_memory_per_rank", steps, fingerprint=fingerprint)
    assert result["verdict"] == FAIL and set(result["evidence"]["per_rank(GiB)"]) == {0, 1}
    assert result["evidence"]["worst_rank(rank)"] == 1


def test_ranks_completed_without_run_metadata_is_not_measured(tiny_profile):
    assert judge(tiny_profile, "ranks_completed", synthetic_steps())["verdict"] == NOT_MEASURED


def test_overflow_gate_reasons_and_evidence_exactly(tiny_profile):
    g = gate(tiny_profile, "overflow_skip_fraction")
    rule = spike_rule(tiny_profile)
    steps = fp16(synthetic_steps())

    def reason(ds_config, records=steps):
        return evaluate_gate(g, records, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, world_size=2,
                             ds_config=ds_config)["reason"]

    assert reason(None) == "no rendered DeepSpeed config: whether the run had a loss scaler is unknown"
    assert reason({"fp16": {"enabled": False}}) == \
        "the rendered DeepSpeed config has no fp16 loss scaler: nothing for it to skip"
    assert reason(FP16_CONFIG, synthetic_steps()) == \
        "fp16 is on but the step records hold no loss scale or skip reason to count from"
    text = "[Rank 0] step=200, skipped=3, lr=[1e-05]\n"
    meta = run_metadata(steps, parse_launcher_log(text), SUMMARY, text, 200)
    result = evaluate_gate(g, steps, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, run_meta=meta,
                           world_size=2, ds_config=FP16_CONFIG)
    assert result["verdict"] == PASS and result["evidence"] == {
        "source": "per-step records (skip_reason)",
        "skip_fraction_per_rank(ratio)": {0: 0.0, 1: 0.0}, "skipped_per_rank(steps)": {0: 0, 1: 0},
        "deepspeed_progress_line": {"at_step(step)": 200, "skipped(steps)": 3,
                                    "note": "DeepSpeed's count also includes the updates the loss stabiliser dropped; "
                                            "not the statistic"}}


def test_overflow_skips_of_no_records_are_zero():
    import pandas as pd

    from zerogate.analysis import measures

    empty = pd.DataFrame({"rank": [], "step": [], "loss_scale": [], "skip_reason": []})
    assert measures.overflow_skips(empty) is None  # no loss scale recorded: no scaler
    one = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "loss_scale": [1.0, 1.0], "skip_reason": [None, "fp16_overflow"]})
    skips = measures.overflow_skips(one)
    assert (skips.per_rank, skips.fraction_per_rank, skips.worst_count, skips.worst_fraction) == ({0: 1}, {0: 0.5}, 1, 0.5)
    nothing = measures.overflow_skips(one.iloc[:0].assign(loss_scale=[]))
    assert nothing is None
    assert measures.OverflowSkips({}, {}, 0, 0.0) == measures.OverflowSkips(
        *({}, {}, max({}.values(), default=0), max({}.values(), default=0.0)))
    assert measures.overflow_skipped_count(one, 1) == 1 and measures.overflow_skipped_count(one, 0) == 1
    assert measures.overflow_skipped_count(one.assign(skip_reason=None), 1) == 0
    assert measures.overflow_skipped_count(one.assign(loss_scale=None), 0) is None


def test_floor_gate_reasons_and_evidence_exactly(tiny_profile):
    g = gate(tiny_profile, "step_time_over_physical_floor")
    rule = spike_rule(tiny_profile)
    steps = synthetic_steps(step_time=0.5)

    def judged(plan):
        return evaluate_gate(g, steps, no_events(), SUMMARY, CPU_FINGERPRINT, 5, 200, rule, plan=plan, world_size=2)

    assert judged(None)["reason"] == "no physical floor: the planner's plan.json is absent or gives none"
    assert judged({"floor": {"optimizer_step(s)": 0.0}})["reason"] == "the planner's floor is 0.0 s, not a positive time"
    assert judged({"floor": {"optimizer_step(s)": -1}})["verdict"] == NOT_MEASURED
    result = judged({"floor": {"optimizer_step(s)": 0.25}})
    assert set(result["evidence"]) == {"per_rank(s)", "worst_rank(rank)", "median_step_time(s)", "floor(s)",
                                       "warmup_steps_excluded(steps)"}
    assert result["evidence"]["floor(s)"] == 0.25 and result["evidence"]["warmup_steps_excluded(steps)"] == 5
    from zerogate.analysis.gates import physical_floor_seconds, unit_of

    assert physical_floor_seconds({}) is None and physical_floor_seconds({"floor": {}}) is None
    assert physical_floor_seconds({"optimizer_step_floor(s)": 2}) == 2.0
    assert unit_of("step_time(s)") == "(s)" and unit_of("memory/device_peak(GiB)") == "(GiB)" and unit_of("loss") == ""
    assert unit_of("a(b)c") == ""


def test_smallest_device_selection_exactly():
    from zerogate.analysis.gates import smallest_device_ranks

    steps = synthetic_steps(ranks=3)
    assert smallest_device_ranks(steps, CPU_FINGERPRINT) == ([0, 1, 2], "CPU accelerator: all ranks share host memory")
    no_devices = gpu_fingerprint()
    assert smallest_device_ranks(steps, no_devices)[0] == [0, 1, 2]
    cpu_with_devices = copy.deepcopy(gpu_fingerprint(("A", 8)))
    cpu_with_devices["accelerator"]["kind"] = "cpu"
    assert smallest_device_ranks(steps, cpu_with_devices)[0] == [0, 1, 2]
    two = gpu_fingerprint(("RTX 5070", 12), ("RTX 4090", 24))  # rank 2 has no device of its own: left out
    assert smallest_device_ranks(steps, two) == ([0], "smallest device: RTX 5070 (12.00 GiB)")
    twins = gpu_fingerprint(("B", 8), ("A", 8), ("C", 9))
    assert smallest_device_ranks(steps, twins) == ([0, 1], "smallest device: A, B (8.00 GiB)")


def test_convergence_needs_twice_the_initial_steps(tiny_profile):
    g = gate(tiny_profile, "loss_convergence")  # initial_steps: 3
    rule = spike_rule(tiny_profile)

    def judged(n):
        return evaluate_gate(g, synthetic_steps(steps=n), no_events(), {"world_size": 2}, CPU_FINGERPRINT, 0, n, rule,
                             world_size=2)

    assert judged(5)["reason"] == "only 5 loss values: too few to tell a trend"
    assert judged(6)["verdict"] != NOT_MEASURED
    steps = synthetic_steps(steps=5)
    steps.loc[steps["step"] == 2, "loss"] = float("nan")
    broken = evaluate_gate(g, steps, no_events(), {"world_size": 2}, CPU_FINGERPRINT, 0, 5, rule, world_size=2)
    assert broken["verdict"] == FAIL and broken["reason"] == "non-finite loss at 1 steps (2)"


def test_memory_gate_gives_per_rank_values_in_the_gates_unit(tiny_profile):
    result = judge(tiny_profile, "peak_memory_per_rank", synthetic_steps(memory_gib=1.0))
    assert result["evidence"]["per_rank(GB)"] == {0: pytest.approx(1.0 * 1024**3 / 1e9), 1: pytest.approx(1.01 * 1024**3 / 1e9)}
    assert result["evidence"]["per_rank(GiB)"] == {0: pytest.approx(1.0), 1: pytest.approx(1.01)}
    from zerogate.analysis.gates import _in_unit

    assert _in_unit(1.0, "memory/device_peak(GiB)", "GiB") == 1.0 and _in_unit(1.0, "step_time(s)", "GB") == 1.0
