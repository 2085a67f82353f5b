"""Property-based tests (hypothesis): synthetic runs whose right verdicts are known by construction.

Each example builds a run from independent choices -- ranks (1-3), steps, fast or slow steps, small or
huge memory, a loss shape (fast drop then plateau, slow decline, flat, rising, U, divergence to inf),
fp16 on or off with or without overflow skips, a gradient-norm fault on some ranks at some steps, NaN
timings or memory on one rank, and damage to the records (a rank removed, a rank truncated, a step
missing, a step recorded twice) -- and asserts every gate of the cpu-tiny profile (every statistic the
schema admits: median, p90, max, loss_convergence, nonfinite_count, overflow_skip_fraction,
floor_ratio, failed_ranks). The expected verdict is derived from the choices, never from the code under
test.
"""

from __future__ import annotations

import json
import math
import os
import typing

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CPU_FINGERPRINT, REPO
from tests.unit.helpers import (
    claim_box,
    judged_run,
    no_events,
    planned_run,
    rendered_run,
    run_spec_for,
    step_record,
    table_of,
    train_summary,
    with_optimizer_step_floor,
)
from tests.unit.helpers import settings as profile_settings
from zerogate.analysis import measures
from zerogate.analysis.columns import DEVICE_PEAK, MICRO_STEP_TIME, STEP_TIME
from zerogate.analysis.health import record_completeness
from zerogate.analysis.parse import run_metadata
from zerogate.config.judging import GateStatistic
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS, GateVerdict

# The profile is read once: hypothesis runs many examples per test, and the gates are data, never mutated.
PROFILE = profile_settings("cpu-tiny")
RULE = SpikeRule.from_settings(PROFILE.stabiliser)
CLAIM_BOX = claim_box()

WARMUP = 5
FLOOR = 1.0  # s: fast steps (0.5 s) are "faster than physics" (FAIL), slow ones (2.5 s) are not
SHAPES = ("fast_drop", "slow_decline", "flat", "rising", "u_shape", "diverge")
DAMAGE = ("none", "drop_rank", "truncate_rank", "missing_step", "repeated_step")
GAPS = ("none", "timing", "memory")
STATISTIC_GATES = (
    "optimizer_step_time",
    "optimizer_step_time_p90",
    "micro_step_time",
    "peak_memory_smallest_device",
    "peak_memory_per_rank",
    "loss_convergence",
    "overflow_skip_fraction",
    "step_time_over_physical_floor",
)


def loss_curve(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    noise = rng.normal(0, 0.02, n)
    x = np.arange(n)
    if shape == "fast_drop":
        drop = max(2, n // 40)
        curve = np.where(x < drop, 5.0 - 4.0 * x / drop, 1.0)
    elif shape == "slow_decline":
        curve = np.linspace(5.0, 1.0, n)
    elif shape == "flat":
        curve = np.full(n, 3.0)
    elif shape == "rising":
        curve = np.linspace(2.0, 4.0, n)
    elif shape == "u_shape":
        half = n // 2
        curve = np.concatenate([np.linspace(3.0, 1.0, half), np.linspace(1.0, 2.5, n - half)])
    else:  # diverge: falls, then infinite from two thirds on
        curve = np.linspace(5.0, 1.0, n)
        curve[2 * n // 3 :] = np.inf
    return curve + noise


def run_choices(damage=st.sampled_from(DAMAGE), gap=st.sampled_from(GAPS)) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {
            "ranks": st.integers(1, 3),
            "steps": st.integers(30, 90),
            "slow": st.booleans(),
            "huge_memory": st.booleans(),
            "shape": st.sampled_from(SHAPES),
            "fp16": st.booleans(),
            "overflow_skips": st.booleans(),
            "fault_steps": st.lists(st.integers(1, 30), max_size=3, unique=True),
            "fault_ranks": st.integers(1, 3),
            "gap": gap,
            "damage": damage,
            "seed": st.integers(0, 2**16),
        }
    )


runs = run_choices()
complete_runs = run_choices(damage=st.just("none"))
clean_runs = run_choices(damage=st.just("none"), gap=st.just("none"))


def build(run: dict) -> pd.DataFrame:
    rng = np.random.default_rng(run["seed"])
    n, ranks = run["steps"], run["ranks"]
    loss = loss_curve(run["shape"], n, rng)
    time = 2.5 if run["slow"] else 0.5
    memory = 30.0 if run["huge_memory"] else 0.5
    skipped = set(range(10, 10 + math.ceil(0.2 * n))) if run["fp16"] and run["overflow_skips"] else set()
    records = []
    for rank in range(ranks):
        for i in range(n):
            step = i + 1
            t = time * (1 + 0.01 * rng.standard_normal())
            fault = step in run["fault_steps"] and rank < run["fault_ranks"]
            fp16 = (
                {
                    "loss_scale": 65536.0,
                    "skip_reason": "fp16_overflow" if step in skipped else None,
                    "update_applied": step not in skipped,
                }
                if run["fp16"]
                else {}
            )
            records.append(
                step_record(
                    step=step,
                    rank=rank,
                    loss=float(loss[i]),
                    grad_norm=math.inf if fault else 1.0,
                    step_time_s=t,
                    micro_step_time_s=t / 8,
                    tokens=200,
                    tokens_per_s=200 / t,
                    device_peak_gib=memory + 0.01 * rank,
                    **fp16,
                )
            )
    steps = table_of(records)
    last = ranks - 1
    if run["gap"] == "timing":
        steps.loc[(steps["rank"] == last) & (steps["step"] > n // 2), [STEP_TIME, MICRO_STEP_TIME]] = np.nan
    elif run["gap"] == "memory":
        steps.loc[(steps["rank"] == last) & (steps["step"] > n // 2), DEVICE_PEAK] = np.nan
    if run["damage"] == "drop_rank":
        steps = steps[steps["rank"] != last]
    elif run["damage"] == "truncate_rank":
        steps = steps[(steps["rank"] != last) | (steps["step"] <= n // 3) | (steps["step"] == n)]
    elif run["damage"] == "missing_step":
        steps = steps[(steps["rank"] != last) | (steps["step"] != n // 2)]
    elif run["damage"] == "repeated_step":
        steps = pd.concat([steps, steps[(steps["rank"] == last) & (steps["step"] == n // 2)]])
    return steps.reset_index(drop=True)


def expected_verdicts(run: dict) -> dict[str, str]:
    """The right verdict of every gate, from the choices alone."""
    if run["damage"] != "none":
        found = {name: NOT_MEASURED for name in STATISTIC_GATES}
        return found | {"ranks_completed": FAIL, "zero_nonfinite": FAIL}
    timing_gap, memory_gap = run["gap"] == "timing", run["gap"] == "memory"
    time_verdict = NOT_MEASURED if timing_gap else (FAIL if run["slow"] else PASS)
    memory_verdict = NOT_MEASURED if memory_gap else (FAIL if run["huge_memory"] else PASS)
    faults = bool(run["fault_steps"]) or run["shape"] == "diverge"
    return {
        "optimizer_step_time": time_verdict,
        "optimizer_step_time_p90": time_verdict,
        "micro_step_time": NOT_MEASURED if timing_gap else PASS,  # 2.5 s / 8 is under 1.82 s
        "peak_memory_smallest_device": memory_verdict,
        "peak_memory_per_rank": memory_verdict,
        "loss_convergence": PASS if run["shape"] in ("fast_drop", "slow_decline") else FAIL,
        "zero_nonfinite": FAIL if faults else PASS,
        "overflow_skip_fraction": NOT_MEASURED
        if not run["fp16"]
        else (FAIL if run["overflow_skips"] else PASS),
        "ranks_completed": PASS,
        "step_time_over_physical_floor": NOT_MEASURED if timing_gap else (PASS if run["slow"] else FAIL),
    }


def judge(run: dict) -> dict[str, GateVerdict]:
    steps = build(run)
    summary = train_summary(run["steps"], run["ranks"])
    meta = run_metadata(steps, no_events(), summary, "", run["steps"])
    ds_config, deviations, _ = rendered_run("claim box" if run["fp16"] else "cpu")
    result = judged_run(
        PROFILE.gates,
        steps,
        no_events(),
        summary,
        run_spec_for(run["steps"], run["ranks"]),
        deviations,
        CPU_FINGERPRINT,
        WARMUP,
        RULE,
        plan=with_optimizer_step_floor(planned_run(), FLOOR),
        run_meta=meta,
        ds_config=ds_config,
    )
    return {g.name: g for g in result.gates}


# ZEROGATE_PROPERTY_EXAMPLES: fewer examples where the suite runs once per mutant (zerogate.bench.mutation).
PROPERTY = settings(
    max_examples=int(os.environ.get("ZEROGATE_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(run=runs)
def test_every_gate_gives_the_verdict_the_run_was_built_to_get(run):
    judged = judge(run)
    expected = expected_verdicts(run)
    assert {name: g.verdict for name, g in judged.items()} == expected
    assert set(judged) == {g.name for g in PROFILE.gates}


@PROPERTY
@given(run=complete_runs)
def test_faults_count_once_per_step_whatever_the_ranks(run):
    judged = judge(run)["zero_nonfinite"]
    n = run["steps"]
    diverged = set(range(2 * n // 3 + 1, n + 1)) if run["shape"] == "diverge" else set()
    faults = {s for s in run["fault_steps"] if s <= n} | diverged
    assert judged.measured == len(faults)
    ranks = {e.step: e.ranks for e in judged.evidence.nonfinite_events}
    for step in run["fault_steps"]:
        if step <= n and step not in diverged:
            assert ranks[step] == list(range(min(run["fault_ranks"], run["ranks"])))


@PROPERTY
@given(run=clean_runs)
def test_gate_numbers_are_the_measures_statistics(run):
    """Complete, gap-free runs: each gate's number is the measures definition, in the gate's unit."""
    steps = build(run)
    judged = judge(run)
    median = measures.step_time(steps, WARMUP).value
    assert judged["optimizer_step_time"].measured == median
    assert judged["optimizer_step_time_p90"].measured == measures.step_time(steps, WARMUP, "p90").value
    assert judged["micro_step_time"].measured == measures.micro_step_time(steps, WARMUP).value
    assert judged["step_time_over_physical_floor"].measured == pytest.approx(median / FLOOR)
    peak = max(measures.peak_memory_per_rank(steps).values())
    assert judged["peak_memory_per_rank"].measured == pytest.approx(peak * 1024**3 / 1e9)
    if run["fp16"]:
        assert judged["overflow_skip_fraction"].measured == measures.overflow_skips(steps).worst_fraction


@PROPERTY
@given(
    values=st.lists(st.floats(0.01, 100.0), min_size=2, max_size=40),
    ranks=st.integers(1, 3),
    gap=st.booleans(),
    statistic=st.sampled_from(["median", "p90", "max"]),
)
def test_a_slowest_rank_statistic_never_skips_a_gap(values, ranks, gap, statistic):
    frame = table_of(
        [
            step_record(rank=r, step=i + 1, step_time_s=v * (1 + r))
            for r in range(ranks)
            for i, v in enumerate(values)
        ]
    )
    if gap:
        frame.loc[len(frame) - 1, STEP_TIME] = np.nan
    result = measures.slowest_rank(frame, STEP_TIME, statistic)
    if gap:
        assert math.isnan(result.value)
    else:
        per_rank = [
            np.quantile(np.array(values) * (1 + r), {"median": 0.5, "p90": 0.9, "max": 1.0}[statistic])
            for r in range(ranks)
        ]
        assert result.value == pytest.approx(max(per_rank)) and result.rank == ranks - 1


@PROPERTY
@given(ranks=st.integers(1, 4), steps=st.integers(1, 40), cut=st.integers(0, 3), data=st.data())
def test_completeness_counts_every_rank_and_step(ranks, steps, cut, data):
    frame = table_of([step_record(rank=r, step=s) for r in range(ranks) for s in range(1, steps + 1)])
    removed = data.draw(
        st.lists(st.tuples(st.integers(0, ranks - 1), st.integers(1, steps)), max_size=cut, unique=True)
    )
    for rank, step in removed:
        frame = frame[~((frame["rank"] == rank) & (frame["step"] == step))]
    found = record_completeness(frame, ranks, steps)
    expected_missing: dict[int, list[int]] = {}
    for rank, step in removed:
        expected_missing.setdefault(rank, []).append(step)
    gone = [r for r in range(ranks) if len(expected_missing.get(r, [])) == steps]
    assert found.missing_ranks == gone
    assert found.missing_steps == {r: sorted(v) for r, v in expected_missing.items() if r not in gone}
    assert found.complete == (not removed)


def test_the_suite_covers_every_statistic_the_schema_admits():

    schema = json.loads((REPO / "config/schemas/profile.schema.json").read_text())
    admitted = set(schema["properties"]["gates"]["items"]["properties"]["statistic"]["enum"])
    assert admitted == set(typing.get_args(GateStatistic))  # the settings admit what the schema does
    assert {g.statistic for g in PROFILE.gates} == admitted
    assert {g.name for g in PROFILE.gates} == set(STATISTIC_GATES) | {"ranks_completed", "zero_nonfinite"}
