"""Per-rank, per-optimizer-step metrics, kept out of the training loop.

One JSON object per line and rank. Keys carry their units. No warm-up flag: which steps are warm-up is
an analysis setting (zerogate.analysis.measures, profile key training.warmup_steps_excluded), so editing it
never retrains. Memory peaks are reset after every window (one optimizer step), so each line holds that
step's peak, not the run's. The loop calls start_step,
micro_step_done per micro-step (a clock read, no device sync) and end_step after its one host sync.
The time each rank spends blocked in collectives (``collectives(s)``) is counted by CollectiveClock, two
clock reads per collective and no added synchronisation; compute and wait per rank are derived from it in
zerogate.analysis.measures. GPU sources (allocator peaks, pinned host memory, NVML) sit behind small probes so
the logic is tested on a CPU with fakes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import psutil
import torch

from zerogate.contracts.base import line_of
from zerogate.contracts.records import StepRecord
from zerogate.runtime.collective_clock import CollectiveClock
from zerogate.runtime.heap import allocator_free_bytes
from zerogate.train.nvml_sampler import NvmlSampler
from zerogate.units import GIB


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


class DeviceProbe(Protocol):
    """What the metrics need from a GPU; CudaProbe is the real one, tests pass a fake."""

    def max_allocated(self) -> int: ...
    def max_reserved(self) -> int: ...
    def pinned_host_bytes(self) -> int | None: ...
    def reset_peaks(self) -> None: ...


class CudaProbe:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def max_allocated(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def max_reserved(self) -> int:
        return torch.cuda.max_memory_reserved(self.device)

    def pinned_host_bytes(self) -> int | None:
        # PyTorch's caching host allocator: the pinned buffers tensors.pin_memory() and the offload use.
        stats = torch.cuda.host_memory_stats()
        return stats.get("allocated_bytes.current", stats.get("reserved_bytes.current"))

    def reset_peaks(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)


@dataclass(frozen=True)
class ModelFlops:
    """What a step's model FLOP/s and MFU are computed from: the training FLOPs per processed token
    (zerogate.hardware.training_flops_per_token) and the device's peak FLOP/s (None: no MFU)."""

    per_token: float | None = None
    peak_per_s: float | None = None


@dataclass(frozen=True)
class MeasurementSources:
    """Where the step metrics read what the clock and /proc do not give: the device's allocator peaks
    (None: CudaProbe on a CUDA device, nothing elsewhere), NVML's process memory (None: not sampled) and
    the collectives' blocked time (installed by the loop before DeepSpeed starts; None: not recorded)."""

    probe: DeviceProbe | None = None
    nvml: NvmlSampler | None = None
    collectives: CollectiveClock | None = None


class StepMetrics:
    """Writes one line per optimizer step for one rank."""

    def __init__(
        self,
        path: str | Path,
        rank: int,
        device: torch.device,
        *,
        flops: ModelFlops = ModelFlops(),
        sources: MeasurementSources = MeasurementSources(),
        append: bool = False,
        placement: dict[str, Any] | None = None,
    ) -> None:
        self.rank = rank
        self.collectives = sources.collectives
        self.placement = placement or {}  # where the rank runs: node, local_rank, host (several nodes)
        self.device = device
        self.flops_per_token, self.peak_flops_per_s = flops.per_token, flops.peak_per_s
        probe = sources.probe
        self.probe = probe if probe is not None else (CudaProbe(device) if device.type == "cuda" else None)
        self.nvml = sources.nvml
        self.process = psutil.Process()
        # Line-buffered: a crash keeps finished lines. Append when resuming from a checkpoint's copy.
        self.handle: IO[str] = open(path, "a" if append else "w", buffering=1)
        self.started = time.perf_counter()
        self.step_started = self.started
        self.micro_marks: list[float] = []
        self.time_spent_s = (
            0.0  # in end_step: what the metrics layer adds to the loop (bench.metrics_overhead)
        )
        self.peak_resettable = _reset_vm_hwm()
        if self.probe is not None:
            self.probe.reset_peaks()

    def start_step(self) -> None:
        if self.collectives is not None:
            self.collectives.take()  # evaluation's and checkpoints' collectives are not the step's
        self.step_started = time.perf_counter()
        self.micro_marks = [self.step_started]

    def micro_step_done(self) -> None:
        """A clock read only: no device sync, so on GPUs these are host-side (dispatch) times."""
        self.micro_marks.append(time.perf_counter())

    def memory(self) -> dict[str, Any]:
        """This step's memory fields of the StepRecord (field names: zerogate.contracts.records)."""
        rss = self.process.memory_info().rss
        free = allocator_free_bytes()
        hwm = _read_vm_hwm_bytes()
        fields: dict[str, Any] = {
            "rss_gib": rss / GIB,
            # Peak RSS of this window where the kernel lets us reset it, else since process start.
            "peak_rss_gib": (hwm if hwm is not None else rss) / GIB,
            # Freed memory the C allocator keeps at the step's end: resident-set garbage the peak
            # prediction does not count; None without glibc's mallinfo2.
            "allocator_free_gib": None if free is None else free / GIB,
        }
        if self.probe is not None:
            reserved = self.probe.max_reserved()
            pinned = self.probe.pinned_host_bytes()
            fields.update(
                max_allocated_gib=self.probe.max_allocated() / GIB,
                max_reserved_gib=reserved / GIB,
                device_peak_gib=reserved / GIB,
                device_peak_source="torch.cuda.max_memory_reserved",
                pinned_host_gib=None if pinned is None else pinned / GIB,
            )
        else:
            fields.update(
                device_peak_gib=fields["peak_rss_gib"],
                device_peak_source="VmHWM per step" if self.peak_resettable else "VmHWM since start",
            )
        if self.nvml is not None:
            peak = self.nvml.take_peak()
            fields["nvml_process_peak_gib"] = None if peak is None else peak / GIB
        return fields

    def reset_window(self) -> None:
        if self.probe is not None:
            self.probe.reset_peaks()
        if self.peak_resettable:
            _reset_vm_hwm()

    def end_step(
        self,
        step: int,
        loss: float,
        grad_norm: float | None,
        lr: float,
        tokens: int,
        micro_steps: int,
        *,
        processed_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> StepRecord:
        """Record a finished optimizer step. The caller has synchronised the device (loss.item()).

        ``tokens`` counts the non-padding tokens trained on; ``processed_tokens`` all positions computed
        (padding included), which is what the FLOP count needs; ``extra``: more StepRecord fields."""
        now = time.perf_counter()
        step_time = now - self.step_started
        try:
            if self.collectives is not None:
                blocked, calls = self.collectives.take()
                extra = {**(extra or {}), "collectives_s": blocked, "collective_calls": calls}
            micro_times = [b - a for a, b in zip(self.micro_marks, self.micro_marks[1:])]
            fields: dict[str, Any] = {
                "step": step,
                "rank": self.rank,
                "loss": float(loss),
                "loss_finite": math.isfinite(loss),
                "grad_norm": None if grad_norm is None else float(grad_norm),
                "lr": float(lr),
                "step_time_s": step_time,
                "micro_step_time_s": step_time / micro_steps,
                "micro_step_time_max_s": max(micro_times) if micro_times else None,
                "tokens": int(tokens),
                "tokens_per_s": tokens / step_time if step_time > 0 else None,
                "elapsed_s": now - self.started,
                "device": str(self.device),
                **self.placement,
            }
            if self.flops_per_token is not None and processed_tokens is not None and step_time > 0:
                flops_per_s = self.flops_per_token * processed_tokens / step_time
                fields["model_flops_per_s"] = flops_per_s
                fields["mfu"] = flops_per_s / self.peak_flops_per_s if self.peak_flops_per_s else None
            fields.update(extra or {})
            fields.update(self.memory())
            record = StepRecord(**fields)
            self.handle.write(line_of(record) + "\n")
            self.reset_window()
            return record
        finally:
            self.time_spent_s += time.perf_counter() - now

    def reopen(self) -> None:
        """Append to the metrics file again after a rollback replaced it with the checkpoint's copy."""
        self.handle.close()
        self.handle = open(self.handle.name, "a", buffering=1)

    def close(self) -> None:
        self.handle.close()
        if self.nvml is not None:
            self.nvml.stop()


class NoMetrics:
    """The metrics layer switched off (zerogate.bench.metrics_overhead): same calls, nothing measured."""

    time_spent_s = 0.0

    def __init__(self, path: str | Path, *args: Any, **kwargs: Any) -> None:
        self.handle = open(path, "a")  # checkpoints copy the (empty) file like a real one

    def start_step(self) -> None:
        pass

    def micro_step_done(self) -> None:
        pass

    def reset_window(self) -> None:
        pass

    def end_step(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reopen(self) -> None:
        pass

    def close(self) -> None:
        self.handle.close()
