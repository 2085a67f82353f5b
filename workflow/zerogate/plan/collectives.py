"""What one collective costs between the ranks of this machine: latency and bandwidth, the floor's inputs.

The probe (``measure``) starts two local ranks (one thread each, as the training ranks run) on the backend
the run uses -- gloo on DeepSpeed's CPU accelerator, NCCL between two GPUs -- and times each collective
kind the communication theory (zerogate.plan.comms) names, at a small message and at larger ones:

- per size, the best batch's mean time per call, batches of back-to-back calls after a warm-up (the ranks'
  arrival skew is spread over the batch);
- latency (s per call) and bandwidth (GB/s = 1e9 bytes/s): the line latency + volume / bandwidth, volume
  the rank's share of one call (``zerogate.plan.comms.volume_bytes``: the same definition the theory and
  the measured records use), that lies at or below every measured call and predicts the most at the
  largest message (``lower_line``). The figures can only under-predict a collective, which is what a floor
  needs (the tests check it); on a busy machine a larger message sometimes beats a smaller one, and the
  line then bends to fit it rather than produce a figure some call contradicts.

Every figure is a ``{"value", "basis", "source"}`` record, basis ``measured``, ``published`` or ``derived``
(a machine description may give published or derived figures for a machine nobody here has); a figure
that is not known is absent, and the floor lists it as missing rather than assuming it.

``time_collective`` is the one timing loop: ``zerogate.bench.gloo_latency`` prints its table with it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

MEASURED, PUBLISHED, DERIVED = "measured", "published", "derived"
BASES = (MEASURED, PUBLISHED, DERIVED)

# The collective kinds the theory uses (zerogate.plan.comms.VOLUME_FACTOR, barrier aside: no payload).
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
# Full-tensor elements (fp32) per call: a small message for latency (two elements per rank), and two larger
# ones for bandwidth (256 KiB and 4 MiB full tensors: the default model's gathers are of that order).
LATENCY_ELEMENTS = 4
BANDWIDTH_ELEMENTS = (1 << 16, 1 << 20)
ELEMENT_BYTES = 4  # float32
# Calls per batch and batches per size: small messages cost ~1 ms with gloo here, 4 MiB ones ~5-10 ms.
LATENCY_BATCH = (8, 12)
BANDWIDTH_BATCH = (3, 3)


def figure(value: float | None, basis: str, source: str) -> dict[str, Any] | None:
    """A figure record, or None for an unknown value (the floor then lists the term as missing)."""
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {basis!r}")
    return None if value is None else {"value": float(value), "basis": basis, "source": source}


def collective_call(kind: str, elements: int, world: int, device: str = "cpu") -> Callable[[], Any]:
    """One ``kind`` collective on a full tensor of ``elements`` float32 elements, as DeepSpeed calls it
    (all_gather_into_tensor and reduce_scatter_tensor for the gather and scatter)."""
    import torch
    import torch.distributed as dist

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


def time_collective(kind: str, elements: int, world: int, calls: int, batches: int, device: str = "cpu",
                    warmup: int = 3) -> float:
    """Seconds per call: the best over ``batches`` of the mean of ``calls`` back-to-back calls, after
    ``warmup`` calls and a barrier. With ``batches=1`` it is the plain mean (what the benchmark prints)."""
    import torch.distributed as dist

    call = collective_call(kind, elements, world, device)
    synchronize = _synchronizer(device)
    for _ in range(warmup):
        call()
    synchronize()
    best = float("inf")
    for _ in range(batches):
        dist.barrier()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def _synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def _rank(rank: int, world: int, port: int, backend: str, out: str) -> None:
    """One measuring rank: every kind at every size; rank 0 writes the raw seconds per call to ``out``."""
    import torch
    import torch.distributed as dist

    from zerogate.train.nodes import LOCAL_MASTER_ADDR

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
            rows = [{"elements": LATENCY_ELEMENTS,
                     "seconds": time_collective(kind, LATENCY_ELEMENTS, world, *LATENCY_BATCH, device=device)}]
            for elements in BANDWIDTH_ELEMENTS:
                rows.append({"elements": elements,
                             "seconds": time_collective(kind, elements, world, *BANDWIDTH_BATCH, device=device)})
            samples[kind] = rows
        if rank == 0:
            Path(out).write_text(json.dumps(samples))
    finally:
        dist.destroy_process_group()


def lower_line(points: list[tuple[float, float]]) -> tuple[float, float | None]:
    """(latency, bandwidth) of the line ``seconds = latency + volume / bandwidth`` that lies at or below every
    (volume, seconds) point, latency >= 0, and predicts the most at the largest volume: the tightest bound
    for large messages that no measured call contradicts. Its candidates are the lines through two points
    and through one point with zero latency (the vertices of that linear programme). Bandwidth None: no
    line with a finite bandwidth fits (every larger message was faster); latency is then the fastest call."""
    candidates: list[tuple[float, float]] = []
    for i, (v1, t1) in enumerate(points):
        if v1 > 0:
            candidates.append((0.0, v1 / t1))
        for v2, t2 in points[i + 1:]:
            if v2 > v1 and t2 > t1:
                bandwidth = (v2 - v1) / (t2 - t1)
                candidates.append((t1 - v1 / bandwidth, bandwidth))
    largest = max(v for v, _ in points)
    fits = [(latency, bandwidth) for latency, bandwidth in candidates
            if latency >= 0 and all(latency + v / bandwidth <= t * (1 + 1e-9) for v, t in points)]
    if not fits:
        return min(t for _, t in points), None
    return max(fits, key=lambda c: (c[0] + largest / c[1], c[0]))  # a tie: the larger latency, tighter for small calls


def figures(samples: dict[str, list[dict[str, float]]], world: int, source: str) -> dict[str, dict[str, Any]]:
    """Per kind: latency_s and bandwidth_gbps figures from raw seconds per call (``samples``: kind ->
    [{"elements", "seconds"}]), and the samples themselves in bytes: ``lower_line`` through the (rank's
    volume, seconds) points, so latency + volume / bandwidth is at or below every measured call. A latency
    of 0 is a figure (the calls do not show one above 0); a bandwidth no call shows is absent."""
    from zerogate.plan.comms import volume_bytes

    result: dict[str, dict[str, Any]] = {}
    for kind, rows in samples.items():
        rows = sorted(rows, key=lambda r: r["elements"])
        points = [(volume_bytes(kind, r["elements"] * ELEMENT_BYTES, world), r["seconds"]) for r in rows]
        latency, bandwidth = lower_line(points)
        sizes = ", ".join(str(r["elements"] * ELEMENT_BYTES) for r in rows)
        how = f"{source}; the line latency + volume / bandwidth at or below the calls at {sizes} B, largest at the largest"
        entry: dict[str, Any] = {
            "latency_s": figure(latency, MEASURED, how),
            "samples": [{"tensor_bytes": r["elements"] * ELEMENT_BYTES, "seconds": r["seconds"]} for r in rows],
        }
        if bandwidth:
            entry["bandwidth_gbps"] = figure(bandwidth / 1e9, MEASURED, how)
        result[kind] = entry
    return result


def predicted_seconds(entry: dict[str, Any], kind: str, tensor_bytes: float, world: int) -> float | None:
    """latency + volume / bandwidth for one call: the floor's model of a collective (None if a figure is
    missing)."""
    from zerogate.plan.comms import volume_bytes

    latency, bandwidth = entry.get("latency_s"), entry.get("bandwidth_gbps")
    if latency is None or bandwidth is None:
        return None
    return latency["value"] + volume_bytes(kind, tensor_bytes, world) / (bandwidth["value"] * 1e9)


def measure(world: int = 2, backend: str = "gloo", timeout_s: float = 60.0) -> dict[str, Any]:
    """Latency and bandwidth of every kind between ``world`` local ranks on ``backend`` (gloo: CPU tensors;
    nccl: one GPU per rank). A failure is recorded with its reason, never raised: the floor then lists the
    communication terms as missing."""
    import torch.multiprocessing as mp

    from zerogate.train.launch import free_port

    started = time.perf_counter()
    how = (f"{world} local processes, one thread each, torch.distributed {backend} over "
           f"{'127.0.0.1' if backend == 'gloo' else 'NCCL (one GPU per rank)'}; float32; per kind: "
           f"{LATENCY_BATCH[1]} batches of {LATENCY_BATCH[0]} calls at {LATENCY_ELEMENTS * ELEMENT_BYTES} B, "
           f"{BANDWIDTH_BATCH[1]} batches of {BANDWIDTH_BATCH[0]} calls at "
           f"{', '.join(str(e * ELEMENT_BYTES) for e in BANDWIDTH_ELEMENTS)} B, after a warm-up; "
           f"the best batch's mean seconds per call on rank 0")
    record: dict[str, Any] = {"backend": backend, "world": world, "how": how,
                              "route": "loopback (one host)" if backend == "gloo" else "between local GPUs"}
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "samples.json")
        try:
            # fork for gloo: the ranks inherit the imported torch (spawn would import it again, seconds);
            # NCCL needs spawn (CUDA cannot be used in a forked child). The probe measures this first,
            # before any OpenMP thread pool exists in this process.
            context = mp.start_processes(_rank, args=(world, free_port(), backend, out), nprocs=world, join=False,
                                         start_method="fork" if backend == "gloo" else "spawn")
            deadline = time.monotonic() + timeout_s
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        process.kill()
                    raise TimeoutError(f"no result within {timeout_s:.0f} s")
            samples = json.loads(Path(out).read_text())
        except Exception as error:  # the probe records the failure; the floor then says what is missing
            record["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"
            record["kinds"] = {}
            record["seconds"] = round(time.perf_counter() - started, 2)
            return record
    record["kinds"] = figures(samples, world, f"probe: {backend}, {world} local ranks")
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record
