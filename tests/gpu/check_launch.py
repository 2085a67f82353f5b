"""The GPU check's processes (tests/gpu/check_runs.py): one short training run of a point through
zerogate.runtime.launch on tests/gpu/capped_loop.py, killed at the call's deadline, and what it came to; the
reading of what a CUDA process holds outside the caching allocator; the DeepSpeed ops the runs load; and the
wall-clock budget every launch is weighed against."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tests.gpu.capped_loop import CAP_VARIABLE
from tests.gpu.check_points import REPO, Point
from zerogate.contracts.base import read_lines
from zerogate.contracts.records import StepRecord
from zerogate.runtime.ops import build_cpu_ops, build_env

OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory")


@dataclass
class Budget:
    """The wall-clock deadline, and what a launch took last (the estimate of the next)."""

    deadline: float
    launch_s: float
    skipped: list[str] = field(default_factory=list)

    def allows(self, what: str, needed: float | None = None) -> bool:
        left = self.deadline - time.time()
        if left >= (needed or self.launch_s):
            return True
        self.skipped.append(f"{what}: {left:.0f} s left, a launch takes about {self.launch_s:.0f} s")
        return False


@dataclass(frozen=True)
class Launch:
    outcome: str  # "trained" | "out of memory" | "failed (exit N)"
    seconds: float
    records: list[StepRecord]
    log: str


def runs_environment() -> dict[str, str]:
    """The environment of every process the check starts: this one's, with DeepSpeed's ops built into and
    loaded from this environment (zerogate.runtime.ops.build_env)."""
    return {**os.environ, **build_env()}


def launch(point: Point, dataset: Path, out: Path, deadline: float, cap_bytes: int | None = None) -> Launch:
    """One run of the point through zerogate.runtime.launch (DeepSpeed's launcher, one rank) on
    tests/gpu/capped_loop.py, the device capped at ``cap_bytes`` if given; killed, with every process it
    started, at ``deadline`` (a hung collective must not take the call's results with it)."""
    env = runs_environment()
    env.pop(CAP_VARIABLE, None)
    if cap_bytes is not None:
        env[CAP_VARIABLE] = str(cap_bytes)
    log = out / "train.log"
    command = [sys.executable, "-m", "zerogate.runtime.launch", "--run-spec", str(point.run_spec)]
    command += ["--log", str(log), "--module", "tests.gpu.capped_loop", "--"]
    command += ["--ds-config", str(point.ds_config), "--settings", str(point.train_settings)]
    command += ["--dataset-dir", str(dataset), "--out-dir", str(out / "train")]
    command += ["--checkpoint-dir", str(out / "checkpoints")]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=max(1.0, deadline - time.time()))
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    seconds = time.monotonic() - started
    text = (log.read_text() if log.is_file() else "") + output
    metrics = out / "train/metrics/rank0.jsonl"
    records = read_lines(StepRecord, metrics) if metrics.is_file() and code == 0 else []
    return Launch(outcome_of(code, text, records), seconds, records, text)


def outcome_of(code: int | None, text: str, records: list[StepRecord]) -> str:
    """What a launch came to from its exit status (None: killed), its log and its step records. A run counts
    as trained only if a step updated the weights: fp16's dynamic loss scale skips the first steps' updates
    (an overflow at the initial scale), and the optimizer's states are allocated at the first update, so a
    run of skipped steps never reached its memory peak."""
    if code is None:
        return "killed at the deadline"
    if code != 0:
        return "out of memory" if any(marker in text for marker in OUT_OF_MEMORY) else f"failed (exit {code})"
    if records and all(record.skip_reason is not None for record in records):
        return f"no update: each of its {len(records)} steps skipped ({records[-1].skip_reason})"
    return "trained"


def process_memory(kind: str, env: dict[str, str]) -> dict[str, Any]:
    """What a CUDA process holds outside the caching allocator (tests/gpu/process_memory.py, in a process of
    its own): its readings, or why there are none."""
    if kind == "cpu":
        return {"not_run": "CPU mode: no CUDA context"}
    command = [sys.executable, "-m", "tests.gpu.process_memory"]
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return {"not_run": "timed out after 180 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"not_run": f"exit {done.returncode}: {(done.stdout + done.stderr)[-1000:]}"}
    return json.loads(lines[-1])


def build_ops(kind: str) -> dict[str, Any]:
    """Build (or load, when built) the DeepSpeed ops the runs use: on the CPU accelerator
    zerogate.runtime.ops's; on CUDA the fused Adam (ZeRO without optimizer offload) and the CPU Adam
    (optimizer offload), for this card's architecture only. Seconds per op, or the error."""
    os.environ.update(build_env())
    if kind == "cpu":
        return {"seconds": build_cpu_ops()}
    major, minor = torch.cuda.get_device_capability(0)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    # Here, not at the top: DeepSpeed picks its accelerator's builders on import, and in CPU mode
    # DS_ACCELERATOR is set only once main runs.
    from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder

    seconds = {}
    for builder in (FusedAdamBuilder, CPUAdamBuilder):
        started = time.monotonic()
        try:
            builder().load(verbose=False)
        except Exception as error:  # recorded: the runs that need the op then fail on their own
            return {"seconds": seconds, "error": f"{builder.__name__}: {error}"}
        seconds[builder.__name__] = round(time.monotonic() - started, 1)
    return {"seconds": seconds}
