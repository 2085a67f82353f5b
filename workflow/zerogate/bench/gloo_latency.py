"""What one gloo collective costs between two local ranks: the floor under ZeRO-3's step time on the CPU.

    python -m zerogate.bench.gloo_latency [--iterations 500] [--out table.txt]   (`make bench`:
    bench_gloo_latency)

Two processes (one thread pool of one thread each, as the training ranks run) time all_gather_into_tensor,
reduce_scatter_tensor and all_reduce for messages the size of one norm weight, one linear layer and the
whole default model. ZeRO-3 with gradient accumulation 8 pays at least one parameter all-gather in the
forward, the backward's gathers and one gradient reduce-scatter in each of the 8 micro-steps; DDP with
no_sync pays one all-reduce per optimizer step. Multiply to see how much of the step-time ratio printed by
zerogate.bench.ddp_vs_zero3 is communication latency alone.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zerogate.runtime.collective_timing import time_collective
from zerogate.runtime.launch import free_port
from zerogate.runtime.nodes import LOCAL_MASTER_ADDR

# Elements per rank: a norm weight, one 64 x 64 linear layer, the 0.14 M-parameter default model.
SIZES = {"norm weight (64)": 64, "linear layer (4096)": 4096, "whole model (139584)": 139_584}
# zerogate.predict.collectives kinds, as DeepSpeed calls them: all_gather_into_tensor, reduce_scatter_tensor,
# all_reduce.
OPERATIONS = ("all_gather", "reduce_scatter", "all_reduce")


def _time(operation: str, elements: int, world: int, iterations: int) -> float:
    """Mean seconds per call after a warm-up, for ``elements`` per rank: the probe's timing loop
    (zerogate.runtime.collective_timing.time_collective) as one batch of ``iterations`` calls."""
    return time_collective(
        operation, elements * world, world, calls=iterations, batches=1, warmup=max(iterations // 10, 5)
    )


def _rank(rank: int, world: int, port: int, iterations: int, out: str | None) -> None:
    torch.set_num_threads(1)
    # DeepSpeed 0.19.8 calls these collectives by the names torch 2.13 deprecates: time what it calls.
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.update(MASTER_ADDR=LOCAL_MASTER_ADDR, MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    lines = []
    for label, elements in SIZES.items():
        times = {op: _time(op, elements, world, iterations) for op in OPERATIONS}
        lines.append(
            f"{label:22s} " + "  ".join(f"{op} {seconds * 1e3:6.3f} ms" for op, seconds in times.items())
        )
    if rank == 0:
        print("\n".join(lines))
        if out:
            with open(out, "a") as handle:
                handle.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    world = 2
    head = f"gloo, {world} local ranks, mean of {args.iterations} calls, elements per rank:"
    print(head)
    if args.out:
        Path(args.out).write_text(head + "\n")
    mp.spawn(_rank, args=(world, free_port(), args.iterations, args.out), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
