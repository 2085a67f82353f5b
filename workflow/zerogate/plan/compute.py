"""The model's own forward and backward, timed on this machine: the floor's measured compute term.

On the CPU accelerator a small model's micro-step is not bound by arithmetic. Eager PyTorch spends
microseconds on every operator (dispatch, autograd's bookkeeping) whatever its size: on the default run
the model's arithmetic at the probe's measured peak takes about 1 ms of the ~25 ms a rank spends outside
collectives in a micro-step (issue 11). A FLOP term cannot see that. Every micro-step of the run executes
the model's forward and backward and more (DeepSpeed's hooks, the other rank on the same cores), so the
fastest of a few timed forward + backward passes of the same model, alone, in eager PyTorch, with the
rank's thread count and micro-batch, no DeepSpeed, is a lower bound measured on the model itself.

CPU accelerator only: on GPUs the host dispatches asynchronously while the device computes, and the
floor's compute is the arithmetic at the card's peak.
"""

from __future__ import annotations

import time
from typing import Any

WARMUP_PASSES = 2  # the first passes allocate and pick kernels: never the fastest, never counted
TIMED_PASSES = 5  # the floor takes the fastest: noise only ever adds time


def measure_forward_backward(model_config: Any, micro_batch: int, seq_len: int, dtype: str, threads: int,
                             timed: int = TIMED_PASSES) -> dict[str, Any]:
    """Seconds of one forward + backward of a randomly initialised ``model_config`` (the same shapes as the
    run's model, so the same operators and arithmetic) on ``micro_batch`` x ``seq_len`` tokens in
    ``dtype`` (fp32 | fp16 | bf16), with ``threads`` intra-op threads; the fastest of ``timed`` passes
    after the warm-up."""
    import torch

    from zerogate.model.build import build_model
    from zerogate.plan.ledger import TORCH_DTYPES

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(model_config).to(getattr(torch, TORCH_DTYPES[dtype]))
    model.train()
    tokens = torch.randint(0, model_config.vocab_size, (micro_batch, seq_len))
    samples = []
    for index in range(WARMUP_PASSES + timed):
        started = time.perf_counter()
        model(input_ids=tokens, labels=tokens).loss.backward()
        elapsed = time.perf_counter() - started
        model.zero_grad(set_to_none=True)
        if index >= WARMUP_PASSES:
            samples.append(elapsed)
    return {
        "forward_backward(s)": min(samples),
        "samples(s)": samples,
        "threads": threads,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "dtype": dtype,
        "parameters": sum(p.numel() for p in model.parameters()),
        "how": (f"the run's model shape, randomly initialised, in eager PyTorch without DeepSpeed: "
                f"{WARMUP_PASSES} warm-up passes, then the fastest of {timed} forward + backward passes on "
                f"{micro_batch} x {seq_len} tokens in {dtype} with {threads} thread(s), alone on the host"),
    }
