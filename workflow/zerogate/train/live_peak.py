"""The live-tensor peak of one optimizer step, sampled after training, outside the timed steps: the measured
counterpart of the ledger's tensor peak on the CPU accelerator (on GPUs torch.cuda.max_memory_allocated is
that, recorded every step by zerogate.train.metrics).

After the last step (its checkpoint saved, its evaluation done, the held bytes recorded) every rank trains
one more optimizer step, the next data window, through the one loop, counted by
zerogate.runtime.live_tensors: every tensor storage alive when the step starts (found through the garbage
collector) and every one an op creates in it, each until it is freed; the peak is the most alive at once.
Nothing of that step is recorded as a training step or saved: the run's records, checkpoints and model
files are those of the steps before it. Counting every op in Python slows the step, which is why it is not
one of the timed ones.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from zerogate.runtime import loop
from zerogate.runtime.live_tensors import counting_live_bytes, live_storages


def bucket_bytes(engine: Any) -> dict[str, int]:
    """Bytes of the gradient buckets a DeepSpeed ZeRO optimizer holds (sized by reduce_bucket_size, not by
    the model), each storage once: measured, so that the model's own share of the peak can be told apart."""
    optimizer = getattr(getattr(engine, "engine", None), "optimizer", None)
    buckets = getattr(optimizer, "ipg_buckets", None) or {}
    seen: dict[int, int] = {}
    for bucket in buckets.values():
        buffers = (
            bucket.buffer
            if isinstance(getattr(bucket, "buffer", None), list)
            else [getattr(bucket, "buffer", None)]
        )
        for buffer in buffers:
            if buffer is not None:
                storage = buffer.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
    return {"reduce_bucket": sum(seen.values())} if seen else {}


def sample_step(engine: Any, batches: Any, accumulation: int, window: int, rank: int) -> dict[str, Any]:
    """Train optimizer step ``window`` (0-based data window) once under the live-tensor count."""
    engine.train()  # the evaluation after the last step left it in eval mode
    gc.collect()
    started = time.perf_counter()
    with counting_live_bytes(seed=live_storages()) as live:
        loop.run(engine, batches, accumulation, window, window + 1)
    return {
        "rank": rank,
        "step": window + 1,
        "peak(bytes)": live.peak,
        "at_start(bytes)": live.start,
        "buffers(bytes)": bucket_bytes(engine),
        "seconds": time.perf_counter() - started,
        "how": (
            "one optimizer step after training (the next data window, not recorded), every tensor storage "
            "alive "
            "at its start (found through the garbage collector) and every one its ops create counted until "
            "freed, by a TorchDispatchMode (zerogate.runtime.live_tensors); the peak is the most alive at "
            "once"
        ),
    }
