"""ZeRO checkpoints that are complete or absent, and the state a resumed run needs besides the model.

Layout under ``results/<profile>/<machine>/checkpoints/`` (outside the train rule's outputs: Snakemake
deletes a failed job's outputs, and these must survive the crash):

    step0000040/            one complete checkpoint
      ds/                   engine.save_checkpoint(tag="ds"): model, ZeRO partitions, optimizer, LR schedule
      ds/zerogate_rank<N>.pt  per-rank RNG states and the loop's own state (stabiliser, skipped windows)
      metrics/rank<N>.jsonl the metrics so far, so the resumed run's files hold every step exactly once
      events.jsonl          the stabiliser's events so far
      zerogate.json         written last, before the rename: step and the run's fingerprint
    .staging-step0000050/   being written; renamed into place only when every rank has finished

A checkpoint is taken only if its zerogate.json names the same fingerprint (config, data, model) as the
run being resumed, so a changed profile never resumes from a stale run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict

MARKER = "zerogate.json"
TAG = "ds"


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step{step:07d}"


def staging_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f".staging-step{step:07d}"


def complete_checkpoints(root: str | Path, fingerprint: str) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint of this run, oldest first."""
    found = []
    for path in Path(root).glob("step*"):
        marker = path / MARKER
        if not marker.is_file():
            continue
        try:
            meta = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("fingerprint") == fingerprint:
            found.append((int(meta["step"]), path))
    return sorted(found)


def latest_checkpoint(root: str | Path, fingerprint: str) -> tuple[int, Path] | None:
    found = complete_checkpoints(root, fingerprint)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_rank_files(
    staging: Path, rank: int, loop_state: dict[str, Any], metrics_file: Path, run_logs: list[Path]
) -> None:
    """This rank's part of a checkpoint besides DeepSpeed's own files: RNG and loop state, its metrics, and
    (rank 0) the run-level logs such as events.jsonl and eval.jsonl, each under its own name."""
    (staging / TAG).mkdir(parents=True, exist_ok=True)
    torch.save({"rng": rng_state(), "loop": loop_state}, staging / TAG / f"zerogate_rank{rank}.pt")
    (staging / "metrics").mkdir(exist_ok=True)
    shutil.copyfile(metrics_file, staging / "metrics" / metrics_file.name)
    for log in run_logs:
        if log.exists():
            shutil.copyfile(log, staging / log.name)


def publish(root: str | Path, step: int, fingerprint: str, keep: int) -> Path:
    """Rank 0, after every rank has written: mark the staging directory complete and rename it into place
    (atomic on one file system), then drop all but the newest ``keep`` checkpoints."""
    staging, final = staging_dir(root, step), step_dir(root, step)
    (staging / MARKER).write_text(json.dumps({"step": step, "fingerprint": fingerprint}) + "\n")
    if final.exists():  # the same step saved again after a rollback: replace it
        shutil.rmtree(final)
    os.replace(staging, final)
    for _, old in complete_checkpoints(root, fingerprint)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def clear_stale(root: str | Path, fingerprint: str) -> list[Path]:
    """Rank 0, before training: remove half-written staging directories and other runs' checkpoints."""
    root = Path(root)
    mine = {path for _, path in complete_checkpoints(root, fingerprint)}
    removed = []
    for path in sorted(root.glob("*")) if root.exists() else []:
        if path.is_dir() and path not in mine:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def restore_rank_files(
    checkpoint: Path, rank: int, metrics_file: Path, run_logs: list[Path]
) -> dict[str, Any]:
    """Put back this rank's metrics (and the given run-level logs) as they were at the checkpoint; return the
    loop state and set the RNG states."""
    saved = torch.load(checkpoint / TAG / f"zerogate_rank{rank}.pt", weights_only=False)
    set_rng_state(saved["rng"])
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(checkpoint / "metrics" / metrics_file.name, metrics_file)
    for log in run_logs:
        kept = checkpoint / log.name
        if kept.exists():
            shutil.copyfile(kept, log)
        else:
            log.unlink(missing_ok=True)
    return saved["loop"]


def export_fp32(
    checkpoint: Path,
    output_dir: Path,
    convert: Callable[..., Any] = convert_zero_checkpoint_to_fp32_state_dict,
) -> Path:
    """One consolidated fp32 state dict from the ZeRO partitions, by DeepSpeed's own zero_to_fp32."""
    output_dir.mkdir(parents=True, exist_ok=True)
    convert(str(checkpoint), str(output_dir), tag=TAG, safe_serialization=True)
    return output_dir
