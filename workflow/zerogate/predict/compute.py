"""The model's own forward and backward, timed on this machine: the floor's measured compute term.

On the CPU accelerator a small model's micro-step is not bound by arithmetic. Eager PyTorch spends
microseconds on every operator (dispatch, autograd's bookkeeping) whatever its size, and ZeRO-3 adds its
hooks around every module (fetch, release, gradient hand-off) in Python: on the default run the model's
arithmetic at the probe's measured peak is about 1 ms of the ~25 ms a rank spends outside collectives in
a micro-step, the plain eager pass about 5 ms. A FLOP term cannot see either.

So the run's model is built with random weights (the same shapes, so the same operators and arithmetic),
wrapped in a DeepSpeed engine from the run's rendered config in a world of one rank, and trained by the
one loop (zerogate.runtime.loop) on random tokens of the run's micro-batch and sequence length with a
rank's thread count, alone on the host; each micro-batch's forward + backward is timed. Every micro-step
of the run executes that work and more (real collectives with the other ranks instead of one-rank ones,
the other rank on the same cores, waiting for it), so the fastest of a few passes is a lower bound
measured on the run's own software. The engine's bookkeeping and the optimizer update between passes
are not timed.

CPU accelerator only: on GPUs the host dispatches asynchronously while the device computes, and the
floor's compute is the arithmetic at the card's peak. The module loads torch and DeepSpeed: only the
measure_model_compute rule imports it, once the rank's environment (DS_ACCELERATOR, thread counts) is set.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.build import apply_training_features, build_model, planned_model_config
from zerogate.predict.setup import TORCH_DTYPES
from zerogate.runtime import loop
from zerogate.runtime.engines import DeepSpeedEngine
from zerogate.runtime.launch import one_rank_config, remove_own_shm_buffers, start_one_rank_world

# The first passes allocate, pick kernels and (ZeRO-3) record the fetch trace: never counted.
WARMUP_PASSES = 2
TIMED_PASSES = 5  # the floor takes the fastest: noise only ever adds time


class _RandomTokens:
    """Random token rows of the run's shape (the compute measured does not depend on their values)."""

    def __init__(self, rows: int, seq_len: int, vocab: int) -> None:
        ids = np.random.default_rng(0).integers(0, vocab, size=(rows, seq_len), dtype=np.int64)
        self.input_ids, self.labels, self.attention_mask = ids, ids.copy(), np.ones_like(ids)


class _PassTimer(loop.LoopHooks):
    """The loop's plain training, each micro-batch's forward + backward timed."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._started = 0.0

    def before_micro(self, step: int, micro: int) -> None:
        self._started = time.perf_counter()

    def after_micro(self, step: int, micro: int) -> None:
        self.samples.append(time.perf_counter() - self._started)


def measure_forward_backward(
    run_spec: RunSpec, ds_config: DsConfig, timed: int = TIMED_PASSES
) -> dict[str, Any]:
    """Seconds of one forward + backward of the run's model shape, randomly initialised, through a DeepSpeed
    engine from the rendered config in a one-rank world, on a rank's micro-batch x sequence length with a
    rank's threads; the fastest of ``timed`` passes after the warm-up passes."""
    threads = run_spec.threads_per_rank
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    micro_batch, accumulation = (
        ds_config.train_micro_batch_size_per_gpu,
        ds_config.gradient_accumulation_steps,
    )
    port = start_one_rank_world(run_spec.backend)
    config = one_rank_config(ds_config.raw)
    model_config = planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len)
    model = build_model(model_config, config).to(getattr(torch, TORCH_DTYPES[run_spec.dtype]))
    # The recomputation (activation checkpointing) and the loss's precision are part of every micro-step's
    # work.
    apply_training_features(model, run_spec.training)
    engine = DeepSpeedEngine(model, config)
    engine.train()

    timer = _PassTimer()
    passes = WARMUP_PASSES + timed
    rows = micro_batch * accumulation * math.ceil(passes / accumulation)
    batches = loop.RankBatches(
        _RandomTokens(rows, run_spec.seq_len, model_config.vocab_size), 1, 0, micro_batch, accumulation, 0
    )
    loop.run(engine, batches, accumulation, 0, math.ceil(passes / accumulation), timer)
    # DeepSpeed's shm comm buffers of this one-rank world outlive the process otherwise.
    remove_own_shm_buffers(port)
    samples = timer.samples[WARMUP_PASSES:passes]
    return {
        "forward_backward(s)": min(samples),
        "samples(s)": samples,
        "threads": threads,
        "micro_batch": micro_batch,
        "seq_len": run_spec.seq_len,
        "dtype": run_spec.dtype,
        "parameters": engine.parameter_count(),
        "through_deepspeed": True,
        "how": (
            f"the run's model shape, randomly initialised, through a DeepSpeed engine from the run's config "
            f"(ZeRO stage {ds_config.stage}) in a one-rank world, trained by the one loop, the engine's "
            f"bookkeeping and optimizer steps untimed: {WARMUP_PASSES} warm-up passes, then the fastest of "
            f"{timed} forward + backward passes on {micro_batch} x {run_spec.seq_len} tokens in "
            f"{run_spec.dtype} with {threads} thread(s), alone on the host"
        ),
    }
