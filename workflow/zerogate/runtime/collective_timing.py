"""Timing collectives between local ranks: the probe's measurement program (zerogate.runtime.probe) and the
one timing loop the gloo benchmark prints with (zerogate.bench.gloo_latency).

``measure`` starts two local ranks (one thread each, as the training ranks run) on the backend the run uses
-- gloo on DeepSpeed's CPU accelerator, NCCL between two GPUs -- and times each collective kind the
communication theory names (zerogate.runtime.collectives), at a small message, at larger ones and at one
far larger (64 MiB): per size,
the best batch's mean time per call, batches of back-to-back calls after a warm-up (the ranks' arrival skew
is spread over the batch). It records the raw seconds per call; what they say about latency and bandwidth is
the planner's to derive (zerogate.predict.collectives.figures).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zerogate.runtime.collectives import (
    BANDWIDTH_BATCH,
    BANDWIDTH_ELEMENTS,
    ELEMENT_BYTES,
    KINDS,
    LARGE_BATCH,
    LARGE_ELEMENTS,
    LARGE_WARMUP,
    LATENCY_BATCH,
    LATENCY_ELEMENTS,
)
from zerogate.runtime.launch import free_port
from zerogate.runtime.nodes import LOCAL_MASTER_ADDR


def collective_call(kind: str, elements: int, world: int, device: str = "cpu") -> Callable[[], Any]:
    """One ``kind`` collective on a full tensor of ``elements`` float32 elements, as DeepSpeed calls it
    (all_gather_into_tensor and reduce_scatter_tensor for the gather and scatter)."""
    shard = torch.ones(max(1, elements // world), device=device)
    full = torch.ones(shard.numel() * world, device=device)
    calls: dict[str, Callable[[], Any]] = {
        "all_reduce": lambda: dist.all_reduce(full),
        "all_gather": lambda: dist.all_gather_into_tensor(full, shard),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, full),
        "broadcast": lambda: dist.broadcast(full, src=0),
        "reduce": lambda: dist.reduce(full, dst=0),
        "barrier": lambda: dist.barrier(),
    }
    if kind not in calls:
        raise KeyError(f"no timing call for collective kind {kind!r}; known: {', '.join(calls)}")
    return calls[kind]


def batch_seconds(
    kind: str, elements: int, world: int, calls: int, batches: int, device: str = "cpu", warmup: int = 3
) -> list[float]:
    """Seconds per call of each batch: the mean of ``calls`` back-to-back calls, ``batches`` times, after
    ``warmup`` calls and a barrier before each batch."""
    call = collective_call(kind, elements, world, device)
    synchronize = _synchronizer(device)
    for _ in range(warmup):
        call()
    synchronize()
    means = []
    for _ in range(batches):
        dist.barrier()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize()
        means.append((time.perf_counter() - started) / calls)
    return means


def time_collective(
    kind: str, elements: int, world: int, calls: int, batches: int, device: str = "cpu", warmup: int = 3
) -> float:
    """Seconds per call: the best of :func:`batch_seconds`. With ``batches=1`` it is the plain mean (what
    the benchmark prints)."""
    return min(batch_seconds(kind, elements, world, calls, batches, device, warmup))


def timed_row(
    kind: str, elements: int, world: int, batch: tuple[int, int], device: str, warmup: int = 3
) -> dict[str, float]:
    """One size of one kind as the probe records it: the best batch's seconds per call and the slowest's."""
    means = batch_seconds(kind, elements, world, *batch, device=device, warmup=warmup)
    return {"elements": elements, "seconds": min(means), "slowest_seconds": max(means)}


def _synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def _rank(rank: int, world: int, port: int, backend: str, out: str) -> None:
    """One measuring rank: every kind at every size; rank 0 writes the raw seconds per call to ``out``."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.update(MASTER_ADDR=LOCAL_MASTER_ADDR, MASTER_PORT=str(port))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, rank=rank, world_size=world)
    samples: dict[str, list[dict[str, float]]] = {}
    try:
        for kind in KINDS:
            rows = [timed_row(kind, LATENCY_ELEMENTS, world, LATENCY_BATCH, device)]
            rows += [
                timed_row(kind, elements, world, BANDWIDTH_BATCH, device) for elements in BANDWIDTH_ELEMENTS
            ]
            rows.append(timed_row(kind, LARGE_ELEMENTS, world, LARGE_BATCH, device, LARGE_WARMUP))
            samples[kind] = rows
        if rank == 0:
            Path(out).write_text(json.dumps(samples))
    finally:
        dist.destroy_process_group()


def measure(world: int = 2, backend: str = "gloo", timeout_s: float = 60.0) -> dict[str, Any]:
    """Seconds per call of every kind and size between ``world`` local ranks on ``backend`` (gloo: CPU
    tensors; nccl: one GPU per rank): ``{"backend", "world", "how", "route", "samples": {kind: [{"elements",
    "seconds", "slowest_seconds"}]}, "seconds"}``. A failure is recorded with its reason (``error``), never
    raised: the floor then lists the communication terms as missing."""
    started = time.perf_counter()
    how = (
        f"{world} local processes, one thread each, torch.distributed {backend} over "
        f"{'127.0.0.1' if backend == 'gloo' else 'NCCL (one GPU per rank)'}; float32; per kind: "
        f"{LATENCY_BATCH[1]} batches of {LATENCY_BATCH[0]} calls at {LATENCY_ELEMENTS * ELEMENT_BYTES} B, "
        f"{BANDWIDTH_BATCH[1]} batches of {BANDWIDTH_BATCH[0]} calls at "
        f"{', '.join(str(e * ELEMENT_BYTES) for e in BANDWIDTH_ELEMENTS)} B, {LARGE_BATCH[1]} batches of "
        f"{LARGE_BATCH[0]} call(s) at {LARGE_ELEMENTS * ELEMENT_BYTES} B, after a warm-up; "
        f"the best batch's mean seconds per call on rank 0, and the slowest batch's"
    )
    record: dict[str, Any] = {
        "backend": backend,
        "world": world,
        "how": how,
        "route": "loopback (one host)" if backend == "gloo" else "between local GPUs",
    }
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "samples.json")
        try:
            # fork for gloo: the ranks inherit the imported torch (spawn would import it again, seconds);
            # NCCL needs spawn (CUDA cannot be used in a forked child). The probe measures this first,
            # before any OpenMP thread pool exists in this process.
            context = mp.start_processes(
                _rank,
                args=(world, free_port(), backend, out),
                nprocs=world,
                join=False,
                start_method="fork" if backend == "gloo" else "spawn",
            )
            deadline = time.monotonic() + timeout_s
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        process.kill()
                    raise TimeoutError(f"no result within {timeout_s:.0f} s")
            samples = json.loads(Path(out).read_text())
        except Exception as error:  # the probe records the failure; the floor then says what is missing
            record["error"] = (
                f"{type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"
            )
            record["samples"] = {}
            record["seconds"] = round(time.perf_counter() - started, 2)
            return record
    record["samples"] = samples
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record
