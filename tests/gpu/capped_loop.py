"""One rank of zerogate's training loop (zerogate.train.loop), its CUDA device first capped to a smaller
card's capacity when the GPU check asks for it (:data:`CAP_VARIABLE`, bytes): the caching allocator then
refuses what would not fit on that card, as ``torch.OutOfMemoryError``. Without the variable, or on the CPU
accelerator, it is the loop unchanged. The GPU check (tests/gpu/check_runs.py) launches it through
zerogate.runtime.launch's ``--module``.
"""

from __future__ import annotations

import os

import torch

from zerogate.runtime.process_exit import exit_without_teardown
from zerogate.train import loop

CAP_VARIABLE = "ZEROGATE_GPU_CHECK_CAP_BYTES"


def cap_device(environ: dict[str, str] | os._Environ = os.environ) -> float | None:
    """Cap this rank's device at ``environ[CAP_VARIABLE]`` bytes (a fraction of its memory: what the caching
    allocator may hold; the CUDA context and NCCL's buffers lie outside it); the fraction set, or None."""
    cap = environ.get(CAP_VARIABLE)
    if not cap or not torch.cuda.is_available():
        return None
    device = int(environ.get("LOCAL_RANK", 0))
    fraction = min(1.0, int(cap) / torch.cuda.get_device_properties(device).total_memory)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


if __name__ == "__main__":
    cap_device()
    exit_without_teardown(loop.main())
