"""Nine ways the judging once gave a wrong verdict (a missing rank that passed, a diverged run that passed, a
healthy fine-tune that failed, ...), one test each: each failed on the code before it was fixed.

Runs are synthetic (tests.unit.helpers.synthetic_steps: 2 ranks, 200 steps unless said); the gates are the
cpu-tiny profile's, judged as check_gates judges them: with the rendered run spec, DeepSpeed config,
deviations and the planner's plan.
"""

import json

import numpy as np
import pytest

from tests.conftest import CPU_FINGERPRINT, REPO
from tests.unit.helpers import (
    claim_box,
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
from zerogate.analysis.columns import DEVICE_PEAK, MICRO_STEP_TIME, STEP_TIME
from zerogate.analysis.gate_measures import unit_of
from zerogate.analysis.loss_trend import loss_spikes
from zerogate.analysis.parse import parse_launcher_log, run_metadata
from zerogate.contracts.base import write_lines
from zerogate.contracts.records import StabiliserEvent
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS, GateVerdict, SlowestRankEvidence
from zerogate.robust import robust_z

PROFILE = settings("cpu-tiny")
RULE = SpikeRule.from_settings(PROFILE.stabiliser)
STEPS = 200
CLAIM_BOX = claim_box()


# ---- the run's real inputs, built by their producers ----------------------------------------------------


def verdicts(
    steps, steps_run=STEPS, summary="finished", events=None, ds_config="fp32", log=""
) -> dict[str, GateVerdict]:
    events = no_events() if events is None else events
    summary = train_summary(steps_run) if summary == "finished" else summary
    meta = run_metadata(steps, events, summary, log, steps_run)
    config = rendered_run("cpu" if ds_config == "fp32" else "claim box")[0]
    result = judged_run(
        PROFILE.gates,
        steps,
        events,
        summary,
        run_spec_for(steps_run),
        rendered_run("cpu")[1],
        CPU_FINGERPRINT,
        5,
        RULE,
        plan=with_optimizer_step_floor(planned_run(), 0.1),
        run_meta=meta,
        ds_config=config,
    )
    return {g.name: g for g in result.gates}


STATISTIC_GATES = (
    "optimizer_step_time",
    "optimizer_step_time_p90",
    "micro_step_time",
    "peak_memory_smallest_device",
    "peak_memory_per_rank",
    "loss_convergence",
    "step_time_over_physical_floor",
)


# Missing or short ranks used to pass.
def test_only_rank_0s_records_fail_completion_and_measure_nothing():
    steps = synthetic_steps()
    only_rank0 = steps[steps["rank"] == 0]
    judged = verdicts(only_rank0)
    assert judged["ranks_completed"].verdict == FAIL and "[1]" in judged["ranks_completed"].reason
    assert judged["zero_nonfinite"].verdict == FAIL
    assert all(judged[name].verdict == NOT_MEASURED for name in STATISTIC_GATES)


def test_a_rank_with_11_of_1000_steps_is_not_complete():
    steps = synthetic_steps(steps=1000)
    short = steps[(steps["rank"] == 0) | (steps["step"] <= 10) | (steps["step"] == 1000)]
    judged = verdicts(short, steps_run=1000)
    assert judged["ranks_completed"].verdict == FAIL and judged["ranks_completed"].measured == 1
    assert "rank 1: 989 steps missing (11, 12" in judged["ranks_completed"].reason
    assert judged["zero_nonfinite"].verdict == FAIL


def test_no_step_records_fail_the_completeness_claims():
    empty = table_of([])
    judged = verdicts(empty)
    assert judged["ranks_completed"].verdict == FAIL and judged["zero_nonfinite"].verdict == FAIL
    assert all(judged[name].verdict == NOT_MEASURED for name in STATISTIC_GATES)


def test_a_rank_with_nan_timings_and_memory_is_not_skipped():
    steps = synthetic_steps(step_time=3.0, memory_gib=30.0)  # rank 1's values would fail every gate
    steps.loc[steps["rank"] == 1, [STEP_TIME, MICRO_STEP_TIME, DEVICE_PEAK]] = np.nan
    steps.loc[steps["rank"] == 0, [STEP_TIME, MICRO_STEP_TIME]] = 0.5
    steps.loc[steps["rank"] == 0, DEVICE_PEAK] = 0.5
    judged = verdicts(steps)
    for name in (
        "optimizer_step_time",
        "optimizer_step_time_p90",
        "micro_step_time",
        "peak_memory_per_rank",
        "peak_memory_smallest_device",
        "step_time_over_physical_floor",
    ):
        assert judged[name].verdict == NOT_MEASURED and "rank 1" in judged[name].reason, name
    assert np.isnan(measures.peak_memory_per_rank(steps)[1])


# A diverged run used to pass.
def test_a_loss_that_turns_infinite_fails_convergence_naming_the_step():
    steps = synthetic_steps(steps=1000, loss_start=5, loss_end=1)
    steps.loc[steps["step"] > 100, "loss"] = np.inf
    judged = verdicts(steps, steps_run=1000)
    assert judged["loss_convergence"].verdict == FAIL
    assert "non-finite loss at 900 steps (101, 102" in judged["loss_convergence"].reason


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


# A healthy fine-tune used to fail, and a U-shape to pass.
def test_fast_drop_then_plateau_passes_and_a_u_shape_fails():
    fine_tune = verdicts(plateau_after_fast_drop(), steps_run=1000)["loss_convergence"]
    assert fine_tune.verdict == PASS and fine_tune.measured == pytest.approx(0.2, abs=0.01)
    u = verdicts(u_shape(), steps_run=1000)["loss_convergence"]
    assert u.verdict == FAIL and "back up" in u.reason


# A run without a loss scaler used to pass the overflow gate on a log line.
def test_overflow_is_not_measured_without_a_loss_scaler_in_the_rendered_config():
    log = "[Rank 0] step=200, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]\n"
    steps = synthetic_steps().assign(loss_scale=1.0, skip_reason=None)  # records that look fp16-ish
    judged = verdicts(steps, events=parse_launcher_log(log), log=log, ds_config="fp32")
    assert judged["overflow_skip_fraction"].verdict == NOT_MEASURED
    assert "rendered DeepSpeed config" in judged["overflow_skip_fraction"].reason
    with_scaler = verdicts(steps, events=parse_launcher_log(log), log=log, ds_config="fp16")
    assert with_scaler["overflow_skip_fraction"].verdict == PASS


# One NaN used to count 2 under skip (one per rank's record) and 1 under rollback.
def test_one_nan_is_one_fault_under_skip_and_rollback(tmp_path):
    from zerogate.analysis.parse import stabiliser_events

    events_file = tmp_path / "events.jsonl"
    write_lines(
        events_file, [StabiliserEvent(step=30, rank=1, kind="nonfinite_loss", value="nan", action="skip")]
    )
    skip = synthetic_steps()
    skip.loc[skip["step"] == 30, "loss"] = np.nan  # skip keeps the record, on both ranks
    rollback = synthetic_steps()  # rollback restored the records: only the event tells
    events = stabiliser_events(events_file)
    for steps in (skip, rollback):
        gate = verdicts(steps, events=events)["zero_nonfinite"]
        assert gate.verdict == FAIL and gate.measured == 1
    gate = verdicts(skip, events=events)["zero_nonfinite"]
    assert gate.evidence.nonfinite_events[0].ranks == [0, 1]


# The floor's Adam term used 36 B/param where its own derivation gives 30 (fp16) or 28 (fp32).
def test_adam_bytes_per_param_follow_their_derivation():
    from zerogate.predict import floor

    assert floor.adam_bytes_per_param(2) == 16 + 12 + 2
    assert floor.adam_bytes_per_param(4) == 16 + 12


# Memory evidence used to mix GiB and GB without units.
def test_every_number_in_the_evidence_has_a_unit():
    steps = synthetic_steps(memory_gib=7.0).assign(loss_scale=65536.0, skip_reason=None)
    judged = verdicts(steps, ds_config="fp16")
    memory = judged["peak_memory_smallest_device"]
    # The memory is recorded in GiB and judged in the gate's GB: the evidence gives both, each labelled.
    assert memory.evidence.metric_unit == "GiB" and memory.unit == "GB"
    assert max(memory.evidence.per_rank_in_gate_unit.values()) == pytest.approx(memory.measured)
    assert max(memory.evidence.per_rank.values()) * 1024**3 / 1e9 == pytest.approx(memory.measured)
    assert all(g.evidence is not None for g in judged.values())
    for name, gate in judged.items():
        assert_units(gate, name)


def assert_units(gate: GateVerdict, where: str) -> None:
    """Every number of the gate's evidence (as gates/verdicts.json holds it) has a unit: it sits under a key
    that ends in one, ``(...)``, or, in a slowest-rank evidence, the unit is a field of its own: the per-rank
    values and the p90 are in ``metric_unit`` (the metric key's unit), the per-rank values in the gate's unit
    in the gate's ``unit``."""
    evidence = gate.evidence.model_dump(by_alias=True)
    if isinstance(gate.evidence, SlowestRankEvidence):
        assert evidence["metric_unit"] and unit_of(gate.metric) == f"({evidence['metric_unit']})", where
        for key in ("per_rank", "p90"):
            assert_numbers(evidence.pop(key), where)
        in_gate_unit = evidence.pop("per_rank_in_gate_unit")
        if in_gate_unit is not None:
            assert gate.unit and gate.unit != evidence["metric_unit"], where
            assert_numbers(in_gate_unit, where)
    assert_keyed_units(evidence, where)


def assert_numbers(value, where):
    assert value is None or isinstance(value, float) or all(isinstance(v, float) for v in value.values()), (
        where
    )


def assert_keyed_units(value, where, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            assert_keyed_units(v, f"{where}.{k}", k if isinstance(k, str) else key)
    elif isinstance(value, list):
        for item in value:
            assert_keyed_units(item, where, key)
    elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        assert key is not None and key.endswith(")") and "(" in key, f"{where}: {value!r} has no unit"


# The spike rule was documented as |z| > 6 but catches upward spikes only (as the stabiliser does).
def test_the_spike_rule_is_documented_as_upward_only_like_the_stabiliser():
    from zerogate.train.stabiliser import Stabiliser

    rule = RULE
    assert "upward only" in rule.describe()
    assert "|z|" not in (REPO / "config/profiles/cpu-tiny.yaml").read_text()
    schema = json.loads((REPO / "config/schemas/profile.schema.json").read_text())
    assert "upward only" in schema["properties"]["stabiliser"]["properties"]["spike_threshold"]["description"]
    # And the code agrees with the words: a sudden drop is no spike, for the gates and the stabiliser.
    losses = [3.0 + 0.01 * np.sin(i) for i in range(60)]
    losses[40] = -20.0
    assert robust_z(losses[40], losses[:40]) < -rule.threshold
    steps = table_of([step_record(step=step, loss=loss) for step, loss in enumerate(losses, start=1)])
    assert loss_spikes(steps, rule).count == 0
    stabiliser = Stabiliser(PROFILE.stabiliser)
    for loss in losses:
        verdict = stabiliser.judge_loss([loss])
        assert verdict.ok
        stabiliser.accept(loss)


# MFU used fp32-accumulate for one card and fp16-accumulate for the other; the floor a third basis.
def test_one_peak_flops_basis_for_mfu_and_the_floor():
    from zerogate import hardware
    from zerogate.train import loop

    # The training loop's MFU divides by hardware.peak_flops (StepMetrics' peak_flops_per_s), as the floor
    # does.
    assert loop.peak_flops is hardware.peak_flops
    for card in ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5070"):
        for dtype in ("fp16", "bf16", "fp32"):
            assert hardware.peak_flops(card, dtype) is not None
            assert hardware.peak(card, dtype).tflops * 1e12 == pytest.approx(hardware.peak_flops(card, dtype))
    # Both cards' fp16 figures on the same (fp16-accumulate) basis: 4090 / 5070 = 330.3 / 123.5.
    assert hardware.peak_flops("NVIDIA GeForce RTX 4090", "fp16") / hardware.peak_flops(
        "NVIDIA GeForce RTX 5070", "fp16"
    ) == pytest.approx(330.3 / 123.5)
    for path in (REPO / "config/machines").glob("*.yaml"):
        assert "peak_tflops:" not in path.read_text(), path  # the machine descriptions name the card only
