"""The training run under faults: killed at a random step and rerun, and NaN injection under each policy.

Real DeepSpeed on 2 CPU ranks (smoke profile). About three minutes in all.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from tests.integration.test_pipeline import copy_repo, env

pytestmark = pytest.mark.integration
STEPS = 40  # the smoke profile's optimizer steps; it checkpoints every 10


def snakemake_command(machine: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--cores", "2", f"results/smoke/{machine}/train/summary.json",
            "--config", "profile=smoke", f"machine={machine}"]


def metrics(results: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (results / f"train/metrics/rank{rank}.jsonl").read_text().splitlines()]


def kill_rank0_at(process: subprocess.Popen, metrics_file: Path, step: int, timeout: float = 600) -> None:
    """SIGKILL the rank-0 training process once its metrics file has reached ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= step:
            for child in psutil.Process(process.pid).children(recursive=True):
                cmdline = child.cmdline()
                if "zerogate.train.loop" in cmdline and "--local_rank=0" in cmdline:
                    child.send_signal(signal.SIGKILL)
                    return
        time.sleep(0.2)
    raise AssertionError(f"training ended or stalled before step {step}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("zerogate-train"))


@pytest.fixture(scope="module")
def uninterrupted(workdir):
    done = subprocess.run(snakemake_command("whole"), cwd=workdir, env=env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir / "results/smoke/whole"


def test_killed_run_resumes_and_matches_an_uninterrupted_one(workdir, uninterrupted):
    kill_step = random.Random().randint(11, STEPS - 3)  # after the first checkpoint (step 10)
    print(f"killing rank 0 after step {kill_step}")
    results = workdir / "results/smoke/killed"
    process = subprocess.Popen(snakemake_command("killed"), cwd=workdir, env=env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        kill_rank0_at(process, results / "train/metrics/rank0.jsonl", kill_step)
        assert process.wait(timeout=300) != 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert not (results / "train/summary.json").exists()  # Snakemake took the failed job's outputs away
    assert list((results / "checkpoints").glob("step*/zerogate.json"))  # but not the checkpoints
    kept = [json.loads(line) for line in (results / "logs/train_failed/metrics/rank1.jsonl").read_text().splitlines()]
    assert len(kept) >= kill_step - 1  # nor the launcher's copy of the records up to the kill

    done = subprocess.run(snakemake_command("killed"), cwd=workdir, env=env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((results / "train/summary.json").read_text())
    last_checkpoint = kill_step // 10 * 10
    assert summary["resumed_from_step"] == last_checkpoint
    assert "resumed from" in (results / "logs/train.log").read_text()
    for rank in (0, 1):
        resumed, whole = metrics(results, rank), metrics(uninterrupted, rank)
        assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))  # every step exactly once
        # Same seed, same data order, restored optimizer/LR/RNG state: the same curve. On the CPU the
        # resumed curve is expected to be bit-identical; the tolerance is 1e-6 relative.
        for a, b in zip(resumed, whole):
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-6), a["step"]
            assert a["lr"] == pytest.approx(b["lr"], rel=1e-9)


def run_policy(workdir: Path, source: Path, name: str, policy: str, inject_step: int, steps: int = 8,
               every: int = 3) -> tuple[subprocess.CompletedProcess, Path]:
    """zerogate.train.loop through the launcher, on the smoke run's data, with a NaN injected on rank 1."""
    out = workdir / "results/policies" / name
    out.mkdir(parents=True, exist_ok=True)
    spec = json.loads((source / "deepspeed/run_spec.json").read_text())
    spec["training"]["optimizer_steps"] = steps
    ds_config = json.loads((source / "deepspeed/ds_config.json").read_text())
    ds_config["scheduler"]["params"]["total_num_steps"] = steps
    settings = json.loads((source / "train/settings.json").read_text())
    settings["stabiliser"].update(policy=policy, inject={"step": inject_step, "rank": 1, "kind": "nan_loss"})
    settings["checkpoint"].update(every_steps=every, keep=2, export_fp32=True)
    for file, value in (("run_spec.json", spec), ("ds_config.json", ds_config), ("settings.json", settings)):
        (out / file).write_text(json.dumps(value))
    command = [sys.executable, "-m", "zerogate.train.launch", "--run-spec", str(out / "run_spec.json"), "--log",
               str(out / "train.log"), "--", "--ds-config", str(out / "ds_config.json"), "--settings",
               str(out / "settings.json"), "--dataset-dir", str(source / "dataset"), "--out-dir", str(out / "train"),
               "--checkpoint-dir", str(out / "checkpoints")]
    done = subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=600)
    return done, out


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train/events.jsonl").read_text().splitlines()]


def final_weights_finite(out: Path) -> bool:
    weights = load_file(next((out / "train/model_fp32").glob("*.safetensors")))
    return bool(weights) and all(torch.isfinite(t).all() for t in weights.values())


def test_abort_stops_at_the_step_and_says_so(workdir, uninterrupted):
    done, out = run_policy(workdir, uninterrupted, "abort", "abort", inject_step=3)
    assert done.returncode != 0
    log = (out / "train.log").read_text()
    assert "stabiliser aborted the run at step 3: nonfinite_loss" in log
    assert [(e["step"], e["rank"], e["kind"], e["action"]) for e in events(out)] == [(3, 1, "nonfinite_loss", "abort")]
    assert [r["step"] for r in metrics(out, 0)] == [1, 2]  # the poisoned step was never applied
    assert not (out / "train/summary.json").exists()
    # The launcher keeps a copy beside the log, which Snakemake does not delete with a failed job's outputs.
    kept = out / "train_failed"
    assert f"records so far are kept in {kept}" in done.stderr
    assert (kept / "events.jsonl").read_text() == (out / "train/events.jsonl").read_text()


def test_skip_drops_the_update_and_the_batch(workdir, uninterrupted):
    done, out = run_policy(workdir, uninterrupted, "skip", "skip", inject_step=5)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(e["step"], e["rank"], e["action"]) for e in events(out)] == [(5, 1, "skip")]
    for rank in (0, 1):
        rows = metrics(out, rank)
        assert [r["step"] for r in rows] == list(range(1, 9))
        assert [r["update_applied"] for r in rows].count(False) == 1 and rows[4]["update_applied"] is False
        assert math.isnan(rows[4]["loss"]) and rows[4]["skip_reason"] == "nonfinite_loss"
        assert all(math.isfinite(r["loss"]) for i, r in enumerate(rows) if i != 4)
        assert rows[5]["data_window"] == 5  # the batch is dropped, the next step takes the next window
    assert json.loads((out / "train/summary.json").read_text())["stabiliser"]["skipped_steps"] == 1
    assert final_weights_finite(out)


def test_rollback_restores_the_checkpoint_and_skips_the_window(workdir, uninterrupted):
    done, out = run_policy(workdir, uninterrupted, "rollback", "rollback", inject_step=5)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(e["step"], e["rank"], e["action"]) for e in events(out)] == [(5, 1, "rollback")]
    assert "rolled back to step 3; data window 4 skipped" in (out / "train.log").read_text()
    summary = json.loads((out / "train/summary.json").read_text())["stabiliser"]
    assert summary["rollbacks"] == 1 and summary["skipped_windows"] == [4]
    for rank in (0, 1):
        rows = metrics(out, rank)
        assert [r["step"] for r in rows] == list(range(1, 9))  # every step once, the replayed ones rewritten
        assert all(math.isfinite(r["loss"]) and r["update_applied"] for r in rows)
        assert [r["data_window"] for r in rows][2:6] == [2, 3, 5, 6]
    assert final_weights_finite(out)
