"""End to end: doctor a finished smoke run's per-rank records and re-run only the judging code (the
parse_logs rule's zerogate.analysis.parse.parse_run, then check_gates' zerogate.analysis.gates.evaluate,
with the same inputs the rules read), never the training.

Reads the session's shared smoke run (``smoke_run``, tests/integration/conftest.py), copying what it doctors:
train/metrics/rank*.jsonl, train/summary.json, train/events.jsonl, logs/train.log,
deepspeed/{run_spec,ds_config,deviations}.json, probe/hardware.json and plan/plan_measured.json.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.unit.helpers import judged_run, settings
from zerogate.analysis.claim_evidence import Evidence
from zerogate.analysis.claims import judge as judge_claims
from zerogate.analysis.parse import parse_run
from zerogate.config.claims import read_claims
from zerogate.contracts.base import read_lines, write_lines
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import StepRecord, TrainSummary
from zerogate.contracts.run import Deviations, DsConfig, RunSpec, TrainSettings
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import (
    DOES_NOT_HOLD,
    FAIL,
    HOLDS_ONLY_WHEN,
    NOT_MEASURED,
    PASS,
    GateVerdict,
    GateVerdicts,
)

TIMING_GATES = (
    "optimizer_step_time",
    "optimizer_step_time_p90",
    "micro_step_time",
    "step_time_over_physical_floor",
)
MEMORY_GATES = ("peak_memory_smallest_device", "peak_memory_per_rank")
REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.integration


@pytest.fixture
def finished_run(smoke_run) -> Path:
    """The session's shared smoke run (tests/integration/conftest.py): read, never changed."""
    return smoke_run.results


def verdicts_of(run: Path, metrics_dir: Path, profile: dict) -> GateVerdicts:
    """parse_logs then check_gates, as the rules run them, over ``metrics_dir`` in place of the run's
    records."""
    typed = settings(profile)
    summary = TrainSummary.read(run / "train/summary.json")
    steps, events, meta = parse_run(
        metrics_dir,
        run / "logs/train.log",
        summary,
        run / "train/events.jsonl",
        typed.training.optimizer_steps,
    )
    return judged_run(
        typed.gates,
        steps,
        events,
        summary,
        RunSpec.read(run / "deepspeed/run_spec.json"),
        Deviations.read(run / "deepspeed/deviations.json"),
        Fingerprint.read(run / "probe/hardware.json"),
        typed.training.warmup_steps_excluded,
        SpikeRule.from_settings(TrainSettings.read(run / "train/settings.json").stabiliser),
        # what check_gates reads: the floor with the measured compute term
        plan=Plan.read(run / "plan/plan_measured.json"),
        run_meta=meta,
        ds_config=DsConfig.read(run / "deepspeed/ds_config.json"),
    )


def judge(run: Path, metrics_dir: Path, profile: dict) -> dict[str, GateVerdict]:
    return {g.name: g for g in verdicts_of(run, metrics_dir, profile).gates}


def doctored_copy(run: Path, tmp_path: Path) -> Path:
    metrics = tmp_path / "metrics"
    shutil.copytree(run / "train/metrics", metrics)
    return metrics


def lines(path: Path) -> list[StepRecord]:
    return read_lines(StepRecord, path)


def last_rank(metrics: Path) -> Path:
    return sorted(metrics.glob("rank*.jsonl"))[-1]


def test_the_untouched_run_is_complete(finished_run, tmp_path, smoke_profile):
    judged = judge(finished_run, doctored_copy(finished_run, tmp_path), smoke_profile)
    assert judged["ranks_completed"].verdict == PASS and judged["zero_nonfinite"].verdict == PASS
    assert all(judged[name].verdict != NOT_MEASURED for name in TIMING_GATES + MEMORY_GATES)


def test_a_truncated_rank_fails_completion_and_measures_nothing(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    records = lines(victim)
    write_lines(
        victim, records[: len(records) // 2] + records[-1:]
    )  # the first half and the last step: max is complete
    judged = judge(finished_run, metrics, smoke_profile)
    rank = records[0].rank
    assert judged["ranks_completed"].verdict == FAIL and f"rank {rank}:" in judged["ranks_completed"].reason
    assert judged["zero_nonfinite"].verdict == FAIL
    for name in TIMING_GATES + MEMORY_GATES + ("loss_convergence",):
        assert judged[name].verdict == NOT_MEASURED and "incomplete" in judged[name].reason, name


def seed_convergence_claim(run: Path, verdicts: GateVerdicts):
    """The seed's convergence statement judged on these verdicts (judge_seed_claims' judge)."""
    claims = read_claims(REPO / "config/claims/seed.yaml")
    claims = claims.model_copy(update={"claims": [c for c in claims.claims if c.kind == "convergence"]})
    evidence = Evidence(claimed_plan=Plan.read(run / "claims/seed/claimed_box_plan.json"), gates=verdicts)
    return judge_claims(claims, evidence, "seed").claims[0].measured_here


def test_the_convergence_claim_counts_the_steps_each_rank_recorded(finished_run, tmp_path, smoke_profile):
    """The untouched 40-step run holds the claim only as far as it ran; the same run with one rank's records
    cut short does not hold it, and says how many steps there were."""
    untouched = seed_convergence_claim(
        finished_run, verdicts_of(finished_run, doctored_copy(finished_run, tmp_path), smoke_profile)
    )
    assert (
        untouched.verdict == HOLDS_ONLY_WHEN
        and "the run is 40 steps long: 1000 were claimed" in untouched.text
    )
    metrics = tmp_path / "cut"
    shutil.copytree(finished_run / "train/metrics", metrics)
    victim = last_rank(metrics)
    write_lines(victim, lines(victim)[:25])
    cut = seed_convergence_claim(finished_run, verdicts_of(finished_run, metrics, smoke_profile))
    assert cut.verdict == DOES_NOT_HOLD and "25 optimizer steps per rank (claimed 1000)" in cut.evidence


def test_a_removed_rank_fails_completion(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    rank = lines(victim)[0].rank
    victim.unlink()
    judged = judge(finished_run, metrics, smoke_profile)
    assert judged["ranks_completed"].verdict == FAIL and f"[{rank}]" in judged["ranks_completed"].reason
    assert judged["zero_nonfinite"].verdict == FAIL
    assert all(judged[name].verdict == NOT_MEASURED for name in TIMING_GATES + MEMORY_GATES)


def test_a_nan_tail_in_timings_and_memory_is_not_measured(finished_run, tmp_path, smoke_profile):
    metrics = doctored_copy(finished_run, tmp_path)
    victim = last_rank(metrics)
    records = lines(victim)
    gaps = {"step_time_s": math.nan, "micro_step_time_s": math.nan, "device_peak_gib": math.nan}
    write_lines(victim, records[:-5] + [record.model_copy(update=gaps) for record in records[-5:]])
    judged = judge(finished_run, metrics, smoke_profile)
    assert judged["ranks_completed"].verdict == PASS  # every record is there; their values are not
    for name in TIMING_GATES + MEMORY_GATES:
        assert judged[name].verdict == NOT_MEASURED and f"rank {records[0].rank}" in judged[name].reason, name
