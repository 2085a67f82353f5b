"""End to end: doctor a finished smoke run's per-rank records and re-run only the judging code (the
parse_logs rule's zerogate.analysis.parse.parse_run, then check_gates' zerogate.analysis.gates.evaluate,
with the same inputs the rules read), never the training.

Reads the session's shared smoke run (``smoke_run``, tests/integration/conftest.py), copying what it doctors: train/metrics/rank*.jsonl, train/summary.json, train/events.jsonl, logs/train.log,
deepspeed/{run_spec,ds_config,deviations}.json, probe/hardware.json and plan/plan_measured.json.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from zerogate.analysis.gates import FAIL, NOT_MEASURED, PASS, evaluate
from zerogate.analysis.measures import SpikeRule
from zerogate.analysis.parse import parse_run
from zerogate.config.settings import training_settings
from zerogate.io import read_json

TIMING_GATES = ("optimizer_step_time", "optimizer_step_time_p90", "micro_step_time", "step_time_over_physical_floor")
MEMORY_GATES = ("peak_memory_smallest_device", "peak_memory_per_rank")


pytestmark = pytest.mark.integration


@pytest.fixture
def finished_run(smoke_run) -> Path:
    """The session's shared smoke run (tests/integration/conftest.py): read, never changed."""
    return smoke_run.results


def judge(run: Path, metrics_dir: Path, profile: dict) -> dict[str, dict]:
    """parse_logs then check_gates, as the rules run them, over ``metrics_dir`` in place of the run's records."""
    summary = read_json(run / "train/summary.json")
    spec = read_json(run / "deepspeed/run_spec.json")
    steps, events, meta = parse_run(metrics_dir, run / "logs/train.log", summary, run / "train/events.jsonl",
                                    profile["training"]["optimizer_steps"])
    plan = run / "plan/plan_measured.json"  # what check_gates reads: the floor with the measured compute
    verdicts = evaluate(profile["gates"], steps, events, summary, spec, read_json(run / "deepspeed/deviations.json"),
                        read_json(run / "probe/hardware.json"), profile["training"]["warmup_steps_excluded"],
                        SpikeRule.from_settings(training_settings(profile)["stabiliser"]),
                        plan=read_json(plan) if plan.exists() else None, run_meta=json.loads(json.dumps(meta)),
                        ds_config=read_json(run / "deepspeed/ds_config.json"))
    return {g["name"]: g for g in verdicts["gates"]}


def doctored_copy(run: Path, tmp_path: Path) -> Path:
    metrics = tmp_path / "metrics"
    shutil.copytree(run / "train/metrics", metrics)
    return metrics


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN as JSON's NaN, as Python writes it


def last_rank(metrics: Path) -> Path:
    return sorted(metrics.glob("rank*.jsonl"))[-1]


def test_the_untouched_run_is_complete(finished_run, tmp_path, smoke_profile):
    judged = judge(finished_run, doctored_copy(finished_run, tmp_path), smoke_profile)
    assert judged["ranks_completed"]["verdict"] == PASS and judged["zero_nonfinite"]["verdict"] == PASS
    assert all(judged[name]["verdict"] != NOT_MEASURED for name in TIMING_GATES + MEMORY_GATES)


def test_a_truncated_rank_fails_completion_and_measures_nothing(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    records = lines(victim)
    write(victim, records[: len(records) // 2] + records[-1:])  # the first half and the last step: max is complete
    judged = judge(finished_run, metrics, smoke_profile)
    rank = records[0]["rank"]
    assert judged["ranks_completed"]["verdict"] == FAIL and f"rank {rank}:" in judged["ranks_completed"]["reason"]
    assert judged["zero_nonfinite"]["verdict"] == FAIL
    for name in TIMING_GATES + MEMORY_GATES + ("loss_convergence",):
        assert judged[name]["verdict"] == NOT_MEASURED and "incomplete" in judged[name]["reason"], name


def test_a_removed_rank_fails_completion(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    rank = lines(victim)[0]["rank"]
    victim.unlink()
    judged = judge(finished_run, metrics, smoke_profile)
    assert judged["ranks_completed"]["verdict"] == FAIL and f"[{rank}]" in judged["ranks_completed"]["reason"]
    assert judged["zero_nonfinite"]["verdict"] == FAIL
    assert all(judged[name]["verdict"] == NOT_MEASURED for name in TIMING_GATES + MEMORY_GATES)


def test_a_nan_tail_in_timings_and_memory_is_not_measured(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    records = lines(victim)
    for record in records[-5:]:
        for key in ("step_time(s)", "micro_step_time(s)", "memory/device_peak(GiB)"):
            record[key] = math.nan
    write(victim, records)
    judged = judge(finished_run, metrics, smoke_profile)
    assert judged["ranks_completed"]["verdict"] == PASS  # every record is there; their values are not
    for name in TIMING_GATES + MEMORY_GATES:
        assert judged[name]["verdict"] == NOT_MEASURED and f"rank {records[0]['rank']}" in judged[name]["reason"], name
