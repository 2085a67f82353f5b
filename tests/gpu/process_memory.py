"""What a CUDA process holds outside the caching allocator before any model is built: NVML's figure for this
process, less what the allocator has reserved, after CUDA's context and a first tensor, after cuBLAS's first
product, and after a one-rank NCCL group's first all-reduce. The GPU check (tests/gpu/check_runs.py) runs it
as a module, in a process of its own, and records the JSON line it prints; the runs' device level less their
allocator level is what the planner's ``cuda_context`` and ``communicator`` terms predict, and these readings
say which part is which.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist

from zerogate.train.nvml_sampler import nvml_query


def outside_allocator(query: Callable[[], int | None]) -> int | None:
    """This process's memory on the device by NVML, less the caching allocator's reserve, bytes."""
    torch.cuda.synchronize()
    held = query()
    return None if held is None else held - torch.cuda.memory_reserved()


def readings() -> dict[str, int | None]:
    query = nvml_query(0)
    if query is None:
        return {"context(bytes)": None, "after_cublas(bytes)": None, "after_nccl(bytes)": None}
    torch.cuda.set_device(0)
    square = torch.ones(64, 64, device="cuda")
    found = {"context(bytes)": outside_allocator(query)}
    square @ square
    found["after_cublas(bytes)"] = outside_allocator(query)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(square)
    found["after_nccl(bytes)"] = outside_allocator(query)
    dist.destroy_process_group()
    return found


if __name__ == "__main__":
    print(json.dumps(readings()))
