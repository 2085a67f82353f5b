"""Checkpoint bookkeeping without DeepSpeed: completeness, fingerprints, pruning, rank files, export."""

import random

import numpy as np
import torch

from tests.unit.helpers import step_record
from zerogate.contracts.base import line_of, read_lines
from zerogate.contracts.records import EvalRecord, StepRecord
from zerogate.train import checkpoint as ckpt

BEFORE = EvalRecord(
    step=0, phase="before", validation_loss=5.5, validation_tokens=320, validation_rows=10, eval_time_s=0.1
)  # the evaluation before training


def fake_save(root, step, rank_count=2, metrics_lines=3):
    """What engine.save_checkpoint and each rank leave in the staging directory."""
    staging = ckpt.staging_dir(root, step)
    (staging / ckpt.TAG).mkdir(parents=True)
    (staging / ckpt.TAG / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    for rank in range(rank_count):
        metrics = root.parent / f"rank{rank}.jsonl"
        metrics.write_text(
            "".join(line_of(step_record(step=s, rank=rank)) + "\n" for s in range(1, metrics_lines + 1))
        )
        logs = []
        if rank == 0:  # rank 0 carries the run-level logs
            logs = [root.parent / "eval.jsonl"]
            logs[0].write_text(line_of(BEFORE) + "\n")
        ckpt.write_rank_files(staging, rank, {"skipped_windows": [step], "stabiliser": {}}, metrics, logs)
    return staging


def test_only_published_checkpoints_of_this_run_count(tmp_path):
    root = tmp_path / "checkpoints"
    fake_save(root, 10)
    assert ckpt.latest_checkpoint(root, "run-a") is None  # staged, not published: absent
    ckpt.publish(root, 10, "run-a", keep=2)
    fake_save(root, 20)  # a crash while saving step 20
    assert ckpt.latest_checkpoint(root, "run-a") == (10, ckpt.step_dir(root, 10))
    assert ckpt.latest_checkpoint(root, "run-b") is None  # another configuration never resumes from it
    removed = ckpt.clear_stale(root, "run-a")
    assert removed == [ckpt.staging_dir(root, 20)] and ckpt.step_dir(root, 10).is_dir()


def test_publish_keeps_the_newest_k(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        fake_save(root, step)
        ckpt.publish(root, step, "run", keep=2)
    assert [s for s, _ in ckpt.complete_checkpoints(root, "run")] == [20, 30]
    assert not ckpt.step_dir(root, 10).exists()


def test_restore_puts_back_metrics_and_rng(tmp_path):
    root = tmp_path / "checkpoints"
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    fake_save(root, 10, metrics_lines=10)
    ckpt.publish(root, 10, "run", keep=2)
    expected = (torch.rand(3), np.random.rand(), random.random())
    metrics = tmp_path / "out" / "rank1.jsonl"
    metrics.parent.mkdir()
    metrics.write_text("garbage from steps after the checkpoint\n")
    loop = ckpt.restore_rank_files(ckpt.step_dir(root, 10), 1, metrics, [])
    assert loop["skipped_windows"] == [10]
    assert [record.step for record in read_lines(StepRecord, metrics)] == list(range(1, 11))
    assert (
        torch.equal(torch.rand(3), expected[0])
        and np.random.rand() == expected[1]
        and random.random() == expected[2]
    )


def test_export_calls_deepspeeds_converter_with_our_tag(tmp_path):
    calls = []
    ckpt.export_fp32(
        tmp_path / "step0000040", tmp_path / "fp32", convert=lambda *a, **k: calls.append((a, k))
    )
    assert calls == [
        ((str(tmp_path / "step0000040"), str(tmp_path / "fp32")), {"tag": "ds", "safe_serialization": True})
    ]


def test_run_logs_travel_with_the_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    fake_save(root, 10)
    ckpt.publish(root, 10, "run", keep=2)
    eval_log, events_log = tmp_path / "out" / "eval.jsonl", tmp_path / "out" / "events.jsonl"
    eval_log.parent.mkdir()
    eval_log.write_text("a record written after the checkpoint\n")
    events_log.write_text("an event the checkpoint never saw\n")
    ckpt.restore_rank_files(
        ckpt.step_dir(root, 10), 0, tmp_path / "out" / "rank0.jsonl", [eval_log, events_log]
    )
    assert read_lines(EvalRecord, eval_log) == [BEFORE]  # as at the checkpoint
    assert not events_log.exists()  # the checkpoint held none: the later one is dropped
