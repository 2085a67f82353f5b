"""Issue 14's nine findings, one test each (each failed on the code before the fix).

Runs are synthetic (tests.unit.helpers.synthetic_steps: 2 ranks, 200 steps unless said); the gates are the
cpu-tiny profile's, judged as check_gates judges them.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import CPU_FINGERPRINT, REPO, gpu_fingerprint
from tests.unit.helpers import no_events, spike_rule, synthetic_steps
from zerogate.analysis import measures
from zerogate.analysis.gates import FAIL, NOT_MEASURED, PASS, evaluate, evaluate_gate
from zerogate.analysis.parse import parse_launcher_log, run_metadata
from zerogate.robust import robust_z

STEPS = 200
SPEC = {"world_size": 2, "training": {"optimizer_steps": STEPS}}
SUMMARY = {"completed_steps": STEPS, "world_size": 2}
FP16 = {"fp16": {"enabled": True, "loss_scale": 0}}
FP32 = {"fp16": {"enabled": False}, "bf16": {"enabled": False}}


def verdicts(profile, steps, summary=SUMMARY, spec=SPEC, events=None, ds_config=FP32, log=""):
    events = no_events() if events is None else events
    meta = run_metadata(steps, events, summary, log, spec["training"]["optimizer_steps"])
    result = evaluate(profile["gates"], steps, events, summary, spec, [], CPU_FINGERPRINT, 5, spike_rule(profile),
                      plan={"floor": {"optimizer_step(s)": 0.1}}, run_meta=meta, ds_config=ds_config)
    return {g["name"]: g for g in result["gates"]}


STATISTIC_GATES = ("optimizer_step_time", "optimizer_step_time_p90", "micro_step_time", "peak_memory_smallest_device",
                   "peak_memory_per_rank", "loss_convergence", "step_time_over_physical_floor")


# Finding 1: missing or short ranks passed.
def test_finding1_only_rank_0s_records_fail_completion_and_measure_nothing(tiny_profile):
    steps = synthetic_steps()
    only_rank0 = steps[steps["rank"] == 0]
    judged = verdicts(tiny_profile, only_rank0)
    assert judged["ranks_completed"]["verdict"] == FAIL and "[1]" in judged["ranks_completed"]["reason"]
    assert judged["zero_nonfinite"]["verdict"] == FAIL
    assert all(judged[name]["verdict"] == NOT_MEASURED for name in STATISTIC_GATES)


def test_finding1_a_rank_with_11_of_1000_steps_is_not_complete(tiny_profile):
    steps = synthetic_steps(steps=1000)
    short = steps[(steps["rank"] == 0) | (steps["step"] <= 10) | (steps["step"] == 1000)]
    judged = verdicts(tiny_profile, short, summary={"completed_steps": 1000, "world_size": 2},
                      spec={"world_size": 2, "training": {"optimizer_steps": 1000}})
    assert judged["ranks_completed"]["verdict"] == FAIL and judged["ranks_completed"]["measured"] == 1
    assert "rank 1: 989 steps missing (11, 12" in judged["ranks_completed"]["reason"]
    assert judged["zero_nonfinite"]["verdict"] == FAIL


def test_finding1_no_step_records_fail_the_completeness_claims(tiny_profile):
    empty = pd.DataFrame(columns=["rank", "step"])
    judged = verdicts(tiny_profile, empty)
    assert judged["ranks_completed"]["verdict"] == FAIL and judged["zero_nonfinite"]["verdict"] == FAIL
    assert all(judged[name]["verdict"] == NOT_MEASURED for name in STATISTIC_GATES)


def test_finding1_a_rank_with_nan_timings_and_memory_is_not_skipped(tiny_profile):
    steps = synthetic_steps(step_time=3.0, memory_gib=30.0)  # rank 1's values would fail every gate
    steps.loc[steps["rank"] == 1, ["step_time(s)", "micro_step_time(s)", "memory/device_peak(GiB)"]] = np.nan
    steps.loc[steps["rank"] == 0, ["step_time(s)", "micro_step_time(s)"]] = 0.5
    steps.loc[steps["rank"] == 0, "memory/device_peak(GiB)"] = 0.5
    judged = verdicts(tiny_profile, steps)
    for name in ("optimizer_step_time", "optimizer_step_time_p90", "micro_step_time", "peak_memory_per_rank",
                 "peak_memory_smallest_device", "step_time_over_physical_floor"):
        assert judged[name]["verdict"] == NOT_MEASURED and "rank 1" in judged[name]["reason"], name
    assert np.isnan(measures.peak_memory_per_rank(steps)[1])


# Finding 2: a diverged run passed.
def test_finding2_a_loss_that_turns_infinite_fails_convergence_naming_the_step(tiny_profile):
    steps = synthetic_steps(steps=1000, loss_start=5, loss_end=1)
    steps.loc[steps["step"] > 100, "loss"] = np.inf
    judged = verdicts(tiny_profile, steps, summary={"completed_steps": 1000, "world_size": 2},
                      spec={"world_size": 2, "training": {"optimizer_steps": 1000}})
    assert judged["loss_convergence"]["verdict"] == FAIL
    assert "non-finite loss at 900 steps (101, 102" in judged["loss_convergence"]["reason"]


def plateau_after_fast_drop(steps=1000, drop_steps=25, high=5.0, low=1.0, noise=0.02, seed=0):
    frame = synthetic_steps(steps=steps)
    rng = np.random.default_rng(seed)
    curve = np.concatenate([np.linspace(high, low, drop_steps), np.full(steps - drop_steps, low)])
    curve = curve + rng.normal(0, noise, steps)
    frame["loss"] = np.tile(curve, 2)
    return frame


def u_shape(steps=1000, start=3.0, bottom=1.0, end=2.5, noise=0.02, seed=0):
    frame = synthetic_steps(steps=steps)
    rng = np.random.default_rng(seed)
    half = steps // 2
    curve = np.concatenate([np.linspace(start, bottom, half), np.linspace(bottom, end, steps - half)])
    frame["loss"] = np.tile(curve + rng.normal(0, noise, steps), 2)
    return frame


# Finding 3: a healthy fine-tune failed, a U-shape passed.
def test_finding3_fast_drop_then_plateau_passes_and_a_u_shape_fails(tiny_profile):
    spec = {"world_size": 2, "training": {"optimizer_steps": 1000}}
    summary = {"completed_steps": 1000, "world_size": 2}
    fine_tune = verdicts(tiny_profile, plateau_after_fast_drop(), summary=summary, spec=spec)["loss_convergence"]
    assert fine_tune["verdict"] == PASS and fine_tune["measured"] == pytest.approx(0.2, abs=0.01)
    u = verdicts(tiny_profile, u_shape(), summary=summary, spec=spec)["loss_convergence"]
    assert u["verdict"] == FAIL and "back up" in u["reason"]


# Finding 4: a run without a loss scaler passed the overflow gate on a log line.
def test_finding4_overflow_is_not_measured_without_a_loss_scaler_in_the_rendered_config(tiny_profile):
    log = "[Rank 0] step=200, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]\n"
    steps = synthetic_steps().assign(loss_scale=1.0, skip_reason=None)  # records that look fp16-ish
    judged = verdicts(tiny_profile, steps, events=parse_launcher_log(log), log=log, ds_config=FP32)
    assert judged["overflow_skip_fraction"]["verdict"] == NOT_MEASURED
    assert "rendered DeepSpeed config" in judged["overflow_skip_fraction"]["reason"]
    with_scaler = verdicts(tiny_profile, steps, events=parse_launcher_log(log), log=log, ds_config=FP16)
    assert with_scaler["overflow_skip_fraction"]["verdict"] == PASS


# Finding 5: one NaN counted 2 under skip and 1 under rollback.
def test_finding5_one_nan_is_one_fault_under_skip_and_rollback(tmp_path, tiny_profile):
    from zerogate.analysis.parse import stabiliser_events

    events_file = tmp_path / "events.jsonl"
    events_file.write_text('{"step": 30, "rank": 1, "kind": "nonfinite_loss", "value": "nan", "action": "skip"}\n')
    skip = synthetic_steps()
    skip.loc[skip["step"] == 30, "loss"] = np.nan  # skip keeps the record, on both ranks
    rollback = synthetic_steps()  # rollback restored the records: only the event tells
    events = stabiliser_events(events_file)
    for steps in (skip, rollback):
        gate = verdicts(tiny_profile, steps, events=events)["zero_nonfinite"]
        assert gate["verdict"] == FAIL and gate["measured"] == 1
    gate = verdicts(tiny_profile, skip, events=events)["zero_nonfinite"]
    assert gate["evidence"]["nonfinite_events"][0]["ranks(rank)"] == [0, 1]


# Finding 6: the floor's Adam term used 36 B/param where its own derivation gives 30 (fp16) or 28 (fp32).
def test_finding6_adam_bytes_per_param_follow_their_derivation():
    from zerogate.plan import floor

    assert floor.adam_bytes_per_param(2) == 16 + 12 + 2
    assert floor.adam_bytes_per_param(4) == 16 + 12


# Finding 7: memory evidence mixed GiB and GB without units.
def test_finding7_every_number_in_the_evidence_has_a_unit(tiny_profile):
    steps = synthetic_steps(memory_gib=7.0).assign(loss_scale=65536.0, skip_reason=None)
    judged = verdicts(tiny_profile, steps, ds_config=FP16)
    memory = judged["peak_memory_smallest_device"]
    assert memory["evidence"]["per_rank(GB)"][0] == pytest.approx(memory["measured"]) or \
        max(memory["evidence"]["per_rank(GB)"].values()) == pytest.approx(memory["measured"])
    for name, gate in judged.items():
        assert_units(gate["evidence"], name)


def assert_units(value, where, key=None):
    """Every number sits under a key that ends in a unit, ``(...)``."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert_units(v, f"{where}.{k}", k if isinstance(k, str) else key)
    elif isinstance(value, list):
        for item in value:
            assert_units(item, where, key)
    elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        assert key is not None and key.endswith(")") and "(" in key, f"{where}: {value!r} has no unit"


# Finding 8: the spike rule was documented as |z| > 6 but catches upward spikes only (as the stabiliser).
def test_finding8_the_spike_rule_is_documented_as_upward_only_like_the_stabiliser(tiny_profile):
    from zerogate.config.settings import training_settings
    from zerogate.train.stabiliser import Stabiliser

    rule = spike_rule(tiny_profile)
    assert "upward only" in rule.describe()
    assert "|z|" not in (REPO / "config/profiles/cpu-tiny.yaml").read_text()
    schema = yaml.safe_load((REPO / "config/schemas/profile.schema.yaml").read_text())
    assert "upward only" in schema["properties"]["stabiliser"]["properties"]["spike_threshold"]["description"]
    # And the code agrees with the words: a sudden drop is no spike, for the gates and the stabiliser.
    losses = [3.0 + 0.01 * np.sin(i) for i in range(60)]
    losses[40] = -20.0
    assert robust_z(losses[40], losses[:40]) < -rule.threshold
    steps = pd.DataFrame({"step": range(1, 61), "rank": 0, "loss": losses})
    assert measures.loss_spikes(steps, rule).count == 0
    stabiliser = Stabiliser(training_settings(tiny_profile)["stabiliser"])
    for loss in losses:
        verdict = stabiliser.judge_loss([loss])
        assert verdict.ok
        stabiliser.accept(loss)


# Finding 9: MFU used fp32-accumulate for one card and fp16-accumulate for the other; the floor a third.
def test_finding9_one_peak_flops_basis_for_mfu_and_the_floor():
    from zerogate import hardware
    from zerogate.plan.floor import _peak
    from zerogate.train.metrics import peak_flops

    for card in ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5070"):
        for dtype in ("fp16", "bf16", "fp32"):
            assert peak_flops(card, dtype) == hardware.peak_flops(card, dtype)
            assert _peak({"name": card}, dtype) * 1e12 == pytest.approx(hardware.peak_flops(card, dtype))
    # Both cards' fp16 figures on the same (fp16-accumulate) basis: 4090 / 5070 = 330.3 / 123.5.
    assert peak_flops("NVIDIA GeForce RTX 4090", "fp16") / peak_flops("NVIDIA GeForce RTX 5070", "fp16") == \
        pytest.approx(330.3 / 123.5)
    for path in (REPO / "config/machines").glob("*.yaml"):
        assert "peak_tflops:" not in path.read_text(), path  # the machine descriptions name the card only
