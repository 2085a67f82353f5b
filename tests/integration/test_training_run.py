"""The training run under faults: interrupted twice (one rank killed, then the whole Snakemake process
group killed) and resumed to the same curve as the uninterrupted smoke run, and NaN injection under each
stabiliser policy.

Real DeepSpeed on 2 CPU ranks (smoke profile). The interrupted run starts from a copy of the session's smoke
run with its training outputs removed, so only training runs again; the policy runs call the launcher on a
copy of the smoke run's files.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from tests.integration import prefetch
from tests.integration.pipeline import (
    MACHINE,
    env,
    shortened_launch,
    side_by_side,
    snakemake,
    snakemake_command,
)
from zerogate.contracts.base import read_lines
from zerogate.contracts.records import StabiliserEvent, StepRecord, TrainSummary
from zerogate.train.checkpoint import MARKER

pytestmark = pytest.mark.integration
STEPS = 40  # the smoke profile's optimizer steps; it checkpoints every 10
SUMMARY = f"results/smoke/{MACHINE}/train/summary.json"


def metrics(results: Path, rank: int) -> list[StepRecord]:
    return read_lines(StepRecord, results / f"train/metrics/rank{rank}.jsonl")


def wait_for_step(process: subprocess.Popen, metrics_file: Path, step: int, timeout: float = 600) -> None:
    """Return once rank 0's metrics file holds ``step`` records (the run is past that step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= step:
            return
        time.sleep(0.2)
    raise AssertionError(f"training ended or stalled before step {step}")


def kill_rank0(process: subprocess.Popen) -> None:
    """SIGKILL the rank-0 training process under ``process`` (a crash of one rank)."""
    for child in psutil.Process(process.pid).children(recursive=True):
        cmdline = child.cmdline()
        if "zerogate.train.loop" in cmdline and "--local_rank=0" in cmdline:
            child.send_signal(signal.SIGKILL)
            return
    raise AssertionError("no rank-0 training process found")


def start(workdir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        snakemake_command(*args, targets=(SUMMARY,)),
        cwd=workdir,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def latest_checkpoint(results: Path) -> int:
    """The step of the newest complete checkpoint (its marker written): the one a rerun resumes from."""
    return max(
        int(p.parent.name.removeprefix("step")) for p in (results / "checkpoints").glob(f"step*/{MARKER}")
    )


def remove_training(results: Path) -> None:
    """Everything training wrote goes; probe, plan, dataset, DeepSpeed config and train settings stay up to
    date, so Snakemake reruns only the train rule."""
    for name in (
        "train/metrics",
        "train/events.jsonl",
        "train/eval.jsonl",
        "train/summary.json",
        "checkpoints",
        "logs/train.log",
        "logs/train_failed",
    ):
        path = results / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def test_interrupted_training_resumes_and_matches_an_uninterrupted_one(smoke_run, tmp_path):
    whole = {rank: metrics(smoke_run.results, rank) for rank in (0, 1)}  # the uninterrupted run
    workdir, results = smoke_run.copy(tmp_path / "run")
    remove_training(results)
    interrupt_twice_and_resume(workdir, results, whole)


def interrupt_twice_and_resume(workdir: Path, results: Path, whole: dict[int, list[StepRecord]]) -> None:
    rank0 = results / "train/metrics/rank0.jsonl"

    # 1. One rank dies after the first checkpoint (step 10): the job fails, Snakemake takes its outputs away
    #    and will train again; the checkpoints and the launcher's copy of the records stay.
    kill_step = random.Random().randint(11, 19)
    print(f"killing rank 0 after step {kill_step}")
    process = start(workdir)
    try:
        wait_for_step(process, rank0, kill_step)
        kill_rank0(process)
        assert process.wait(timeout=300) != 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert not (results / "train/summary.json").exists()
    assert list((results / "checkpoints").glob(f"step*/{MARKER}"))
    kept = read_lines(StepRecord, results / "logs/train_failed/metrics/rank1.jsonl")
    assert len(kept) >= kill_step - 1

    # 2. Rerun: Snakemake trains again rather than trust the partial run (wait_for_step fails otherwise), and
    #    once it has resumed and passed the checkpoint at step 30 the whole Snakemake process group is killed
    #    (kill -9: nothing gets to clean up; the lock and the incomplete outputs stay). It resumes from the
    #    newest checkpoint the kill left: step 10, or 20 where rank 0 ran past step 20 before the kill took.
    first_checkpoint = latest_checkpoint(results)
    assert first_checkpoint >= 10
    group_kill_step = random.Random().randint(31, 34)
    print(f"killing the Snakemake process group after step {group_kill_step}")
    process = start(workdir)
    try:
        wait_for_step(process, rank0, group_kill_step)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=120)
    assert f"at step {first_checkpoint}" in (results / "logs/train.log").read_text()  # it had resumed

    # 3. After a kill -9 the lock needs `snakemake --unlock` (the README says so); then the usual command
    #    resumes: the workflow profile (profiles/default) sets rerun-incomplete, so no flag is needed.
    last_checkpoint = latest_checkpoint(results)
    assert last_checkpoint >= 30
    assert snakemake(workdir, targets=("--unlock",), timeout=300).returncode == 0
    done = snakemake(workdir, targets=(SUMMARY,))
    assert done.returncode == 0, done.stderr[-4000:]
    assert TrainSummary.read(results / "train/summary.json").resumed_from_step == last_checkpoint
    assert "resumed from" in (results / "logs/train.log").read_text()
    for rank in (0, 1):
        resumed = metrics(results, rank)
        assert [r.step for r in resumed] == list(range(1, STEPS + 1))  # every step exactly once
        # Same seed, same data order, restored optimizer/LR/RNG state: the same curve. On the CPU the
        # resumed curve is expected to be bit-identical; the tolerance is 1e-6 relative.
        for a, b in zip(resumed, whole[rank], strict=True):
            assert a.loss == pytest.approx(b.loss, rel=1e-6), a.step
            assert a.lr == pytest.approx(b.lr, rel=1e-9)


def run_policy(
    workdir: Path, results: Path, out: Path, policy: str, inject_step: int, steps: int = 8, every: int = 3
) -> tuple[subprocess.CompletedProcess, Path]:
    """zerogate.train.loop through the launcher, on the finished run's files in ``results``, with a NaN
    injected on rank 1."""
    command = shortened_launch(
        results,
        out,
        steps,
        stabiliser={"policy": policy, "inject": {"step": inject_step, "rank": 1, "kind": "nan_loss"}},
        checkpoint={"every_steps": every, "keep": 2, "export_fp32": True},
    )
    done = subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=600)
    return done, out


def events(out: Path) -> list[StabiliserEvent]:
    return read_lines(StabiliserEvent, out / "train/events.jsonl")


def final_weights_finite(out: Path) -> bool:
    weights = load_file(next((out / "train/model_fp32").glob("*.safetensors")))
    return bool(weights) and all(torch.isfinite(t).all() for t in weights.values())


# Each policy's run, with the step of its NaN. The three are independent 8-step launches that spend most of
# their time starting up (imports, one process at a time in each launcher): they run side by side.
POLICY_RUNS = {"abort": 3, "skip": 5, "rollback": 5}


@prefetch.prefetched
def prepare_policy_runs(tmp_path_factory, smoke_run):
    """The three launches side by side, on a copy of the smoke run's rendered files and dataset."""
    launches = {
        policy: lambda workdir, inputs, out, policy=policy, step=step: run_policy(
            workdir, inputs, out, policy, inject_step=step
        )
        for policy, step in POLICY_RUNS.items()
    }
    return side_by_side(
        tmp_path_factory.mktemp("zerogate-policies"), smoke_run.workdir, smoke_run.results, launches
    )


@pytest.fixture(scope="module")
def policy_runs(smoke_run, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    return prefetch.result(__name__, prepare_policy_runs, tmp_path_factory, smoke_run)


def test_abort_stops_at_the_step_and_says_so(policy_runs):
    done, out = policy_runs["abort"]
    assert done.returncode != 0
    log = (out / "train.log").read_text()
    assert "stabiliser aborted the run at step 3: nonfinite_loss" in log
    assert [(e.step, e.rank, e.kind, e.action) for e in events(out)] == [(3, 1, "nonfinite_loss", "abort")]
    assert [r.step for r in metrics(out, 0)] == [1, 2]  # the poisoned step was never applied
    assert not (out / "train/summary.json").exists()
    # The launcher keeps a copy beside the log, which Snakemake does not delete with a failed job's outputs.
    kept = out / "train_failed"
    assert f"records so far are kept in {kept}" in done.stderr
    assert (kept / "events.jsonl").read_text() == (out / "train/events.jsonl").read_text()


def test_skip_drops_the_update_and_the_batch(policy_runs):
    done, out = policy_runs["skip"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(e.step, e.rank, e.action) for e in events(out)] == [(5, 1, "skip")]
    for rank in (0, 1):
        rows = metrics(out, rank)
        assert [r.step for r in rows] == list(range(1, 9))
        assert [r.update_applied for r in rows].count(False) == 1 and rows[4].update_applied is False
        assert math.isnan(rows[4].loss) and rows[4].skip_reason == "nonfinite_loss"
        assert all(math.isfinite(r.loss) for i, r in enumerate(rows) if i != 4)
        assert rows[5].data_window == 5  # the batch is dropped, the next step takes the next window
    assert TrainSummary.read(out / "train/summary.json").stabiliser.skipped_steps == 1
    assert final_weights_finite(out)


def test_rollback_restores_the_checkpoint_and_skips_the_window(policy_runs):
    done, out = policy_runs["rollback"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(e.step, e.rank, e.action) for e in events(out)] == [(5, 1, "rollback")]
    assert "rolled back to step 3; data window 4 skipped" in (out / "train.log").read_text()
    summary = TrainSummary.read(out / "train/summary.json").stabiliser
    assert summary.rollbacks == 1 and summary.skipped_windows == [4]
    for rank in (0, 1):
        rows = metrics(out, rank)
        assert [r.step for r in rows] == list(range(1, 9))  # every step once, the replayed ones rewritten
        assert all(math.isfinite(r.loss) and r.update_applied for r in rows)
        assert [r.data_window for r in rows][2:6] == [2, 3, 5, 6]
    assert final_weights_finite(out)


def test_the_ddp_baseline_trains_the_profiles_pretrained_model(smoke_run, tmp_path):
    """The DDP engine runs the training run's own loop on the model the manifest names: a pretrained model
    is loaded, not a random one built from the profile's shape."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from zerogate.contracts.data import DatasetManifest, ModelInfo

    pretrained = tmp_path / "pretrained"
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=256,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )
    )
    model.save_pretrained(pretrained)
    parameters = sum(p.numel() for p in model.parameters())
    dataset = tmp_path / "dataset"
    shutil.copytree(smoke_run.results / "dataset", dataset)
    manifest = DatasetManifest.read(dataset / "manifest.json")
    model_info = ModelInfo(source=str(pretrained), kind="hf_dir", directory=str(pretrained))
    manifest.model_copy(update={"model": model_info}).write(dataset / "manifest.json")
    out = tmp_path / "ddp"
    command = shortened_launch(smoke_run.results, out, steps=2, checkpoint={"every_steps": 0})
    command[command.index("--dataset-dir") + 1] = str(dataset)
    done = subprocess.run(
        [*command, "--engine", "ddp"],
        cwd=smoke_run.workdir,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = TrainSummary.read(out / "train/summary.json")
    assert summary.engine == "ddp" and summary.parameters == parameters != 139_584  # not the profile's shape
    for rank in (0, 1):
        rows = metrics(out, rank)
        assert [r.step for r in rows] == [1, 2] and all(
            math.isfinite(r.loss) and r.update_applied for r in rows
        )
