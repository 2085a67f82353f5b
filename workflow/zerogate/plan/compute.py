"""The model's own forward and backward, timed on this machine: the floor's measured compute term.

On the CPU accelerator a small model's micro-step is not bound by arithmetic. Eager PyTorch spends
microseconds on every operator (dispatch, autograd's bookkeeping) whatever its size, and ZeRO-3 adds its
hooks around every module (fetch, release, gradient hand-off) in Python: on the default run the model's
arithmetic at the probe's measured peak is about 1 ms of the ~25 ms a rank spends outside collectives in
a micro-step, the plain eager pass about 5 ms (issue 11). A FLOP term cannot see either.

So the run's model is built with random weights (the same shapes, so the same operators and arithmetic),
wrapped in a DeepSpeed engine from the run's rendered config in a world of one rank, and its forward +
backward (``engine(...)``, ``engine.backward``) timed on the run's micro-batch with a rank's thread count,
alone on the host: every micro-step of the run executes that work and more (real collectives with the
other ranks instead of one-rank ones, the other rank on the same cores, waiting for it), so the fastest
of a few passes is a lower bound measured on the run's own software. The optimizer step
(``engine.step()``) runs between passes, untimed. Without a config, the plain eager pass is timed.

CPU accelerator only: on GPUs the host dispatches asynchronously while the device computes, and the
floor's compute is the arithmetic at the card's peak.
"""

from __future__ import annotations

import time
from typing import Any

WARMUP_PASSES = 2  # the first passes allocate, pick kernels and (ZeRO-3) record the fetch trace: never counted
TIMED_PASSES = 5  # the floor takes the fastest: noise only ever adds time


def one_rank_engine(model_factory: Any, ds_config: dict[str, Any], backend: str) -> tuple[Any, int]:
    """A DeepSpeed engine from ``ds_config`` around ``model_factory()`` in a world of one rank (this
    process), built as training builds it (ZeRO-3's Init when the config asks for stage 3), and the
    rendezvous port (its shm buffers are named after it)."""
    import deepspeed

    from zerogate.train.launch import one_rank_config, start_one_rank_world

    port = start_one_rank_world(backend)
    config = one_rank_config(ds_config)
    zero3 = config.get("zero_optimization", {}).get("stage") == 3
    with deepspeed.zero.Init(config_dict_or_path=config, enabled=zero3):
        model = model_factory()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return engine, port


def measure_forward_backward(model_config: Any, micro_batch: int, seq_len: int, dtype: str, threads: int,
                             ds_config: dict[str, Any] | None = None, backend: str = "gloo",
                             timed: int = TIMED_PASSES) -> dict[str, Any]:
    """Seconds of one forward + backward of a randomly initialised ``model_config`` on ``micro_batch`` x
    ``seq_len`` tokens in ``dtype`` (fp32 | fp16 | bf16), with ``threads`` intra-op threads; the fastest of
    ``timed`` passes after the warm-up. With ``ds_config`` (the run's rendered config) through a DeepSpeed
    engine in a one-rank world (``backend``); without, plain eager PyTorch."""
    import torch

    from zerogate.model.build import build_model
    from zerogate.train.deepspeed_adapter import parameter_count
    from zerogate.plan.ledger import TORCH_DTYPES

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    tokens = torch.randint(0, model_config.vocab_size, (micro_batch, seq_len))
    port = None
    if ds_config is not None:
        engine, port = one_rank_engine(lambda: build_model(model_config).to(torch_dtype), ds_config, backend)
        engine.train()
        model = engine.module

        def one_pass() -> None:
            engine.backward(engine(input_ids=tokens, labels=tokens).loss)

        after = engine.step  # DeepSpeed counts micro-steps; a boundary's optimizer update is not timed
        how = (f"through a DeepSpeed engine from the run's config (ZeRO stage "
               f"{ds_config.get('zero_optimization', {}).get('stage', 0)}) in a one-rank world, the optimizer's "
               "steps untimed")
    else:
        model = build_model(model_config).to(torch_dtype)
        model.train()

        def one_pass() -> None:
            model(input_ids=tokens, labels=tokens).loss.backward()

        def after() -> None:
            model.zero_grad(set_to_none=True)

        how = "in eager PyTorch without DeepSpeed"
    samples = []
    for index in range(WARMUP_PASSES + timed):
        started = time.perf_counter()
        one_pass()
        elapsed = time.perf_counter() - started
        after()
        if index >= WARMUP_PASSES:
            samples.append(elapsed)
    if port is not None:  # DeepSpeed's shm comm buffers of this one-rank world outlive the process otherwise
        from zerogate.train.launch import remove_own_shm_buffers

        remove_own_shm_buffers(port)
    return {
        "forward_backward(s)": min(samples),
        "samples(s)": samples,
        "threads": threads,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "dtype": dtype,
        "parameters": parameter_count(model),
        "through_deepspeed": ds_config is not None,
        "how": (f"the run's model shape, randomly initialised, {how}: {WARMUP_PASSES} warm-up passes, then the "
                f"fastest of {timed} forward + backward passes on {micro_batch} x {seq_len} tokens in {dtype} "
                f"with {threads} thread(s), alone on the host"),
    }
