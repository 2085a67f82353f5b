"""Per-rank, per-optimizer-step metrics, kept out of the training loop.

One JSON object per line and rank. Keys carry their units. Memory peaks are reset after every window
(one optimizer step), so each line holds that step's peak, not the run's.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import IO, Any

import psutil
import torch

GIB = 1024**3


def _read_vm_hwm_bytes() -> int | None:
    """Peak resident set of this process since the last reset (Linux /proc/self/status VmHWM)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_vm_hwm() -> bool:
    """Reset VmHWM to the current RSS (writing 5 to clear_refs); False where the kernel forbids it."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


class StepMetrics:
    """Writes one line per optimizer step for one rank."""

    def __init__(self, path: str | Path, rank: int, device: torch.device, warmup_steps: int) -> None:
        self.rank = rank
        self.device = device
        self.warmup_steps = warmup_steps
        self.process = psutil.Process()
        self.handle: IO[str] = open(path, "w", buffering=1)  # line-buffered: a crash keeps finished lines
        self.started = time.perf_counter()
        self.step_started = self.started
        self.peak_resettable = _reset_vm_hwm()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def start_step(self) -> None:
        self.step_started = time.perf_counter()

    def memory(self) -> dict[str, Any]:
        rss = self.process.memory_info().rss
        hwm = _read_vm_hwm_bytes()
        fields: dict[str, Any] = {
            "memory/rss(GiB)": rss / GIB,
            # Peak RSS of this window where the kernel lets us reset it, else since process start.
            "memory/peak_rss(GiB)": (hwm if hwm is not None else rss) / GIB,
        }
        if self.device.type == "cuda":
            allocated = torch.cuda.max_memory_allocated(self.device)
            reserved = torch.cuda.max_memory_reserved(self.device)
            fields["memory/max_allocated(GiB)"] = allocated / GIB
            fields["memory/max_reserved(GiB)"] = reserved / GIB
            fields["memory/device_peak(GiB)"] = reserved / GIB
            fields["memory/device_peak_source"] = "torch.cuda.max_memory_reserved"
        else:
            fields["memory/device_peak(GiB)"] = fields["memory/peak_rss(GiB)"]
            fields["memory/device_peak_source"] = "VmHWM per step" if self.peak_resettable else "VmHWM since start"
        return fields

    def reset_window(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.peak_resettable:
            _reset_vm_hwm()

    def end_step(
        self, step: int, loss: float, grad_norm: float | None, lr: float, tokens: int, micro_steps: int
    ) -> dict[str, Any]:
        """Record a finished optimizer step. The caller has synchronised the device (loss.item())."""
        now = time.perf_counter()
        step_time = now - self.step_started
        record: dict[str, Any] = {
            "step": step,
            "rank": self.rank,
            "warmup": step <= self.warmup_steps,
            "loss": float(loss),
            "loss_finite": math.isfinite(loss),
            "grad_norm": _finite_or_none(grad_norm),
            "lr": float(lr),
            "step_time(s)": step_time,
            "micro_step_time(s)": step_time / micro_steps,
            "tokens": int(tokens),
            "tokens_per_s": tokens / step_time if step_time > 0 else None,
            "elapsed(s)": now - self.started,
            "device": str(self.device),
        }
        record.update(self.memory())
        self.handle.write(json.dumps(record) + "\n")
        self.reset_window()
        return record

    def close(self) -> None:
        self.handle.close()
