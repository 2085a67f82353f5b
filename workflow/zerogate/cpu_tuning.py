"""Communication settings that make ZeRO-3 fast on DeepSpeed's CPU accelerator, as overrides with reasons.

Found by profiling the default run with py-spy (issue 4): the "auto" rule hidden_size^2 gives the
0.13 M-parameter default model 4096-element buckets, so every micro-step's backward ran about 30 gloo
reduce-scatters, and overlap_comm has no streams to overlap on with the CPU accelerator. Together these
halved the ZeRO-3 step time; either alone did not help (large buckets with overlap_comm on ran slower).
Stage, offloads and batch geometry stay the claim's.

Applied by zerogate.ds_config.render on the CPU accelerator, each recorded as a deviation that does not
change the experiment. zerogate.bench.ddp_vs_zero3 measures the config with and without them.
"""

from __future__ import annotations

from typing import Any

# DeepSpeed's own defaults (deepspeed/runtime/zero/config.py) for the two bucket sizes.
REDUCE_BUCKET_ELEMENTS = 500_000_000
PREFETCH_BUCKET_ELEMENTS = 50_000_000


def cpu_comm_overrides() -> list[dict[str, Any]]:
    return [
        {"path": "zero_optimization.reduce_bucket_size", "value": REDUCE_BUCKET_ELEMENTS,
         "reason": "DeepSpeed's default 5e8 elements: one gloo reduce-scatter per micro-step instead of one per "
                   "hidden_size^2 elements"},
        {"path": "zero_optimization.stage3_prefetch_bucket_size", "value": PREFETCH_BUCKET_ELEMENTS,
         "reason": "DeepSpeed's default 5e7 elements: fewer, larger all-gathers"},
        {"path": "zero_optimization.overlap_comm", "value": False,
         "reason": "the CPU accelerator has no streams to overlap communication on; measured slower with it on"},
    ]


def untuned_overrides(hidden_size: int) -> list[dict[str, Any]]:
    """The same keys as the Hugging Face "auto" rule and the claim set them (what the CPU path ran with
    before the tuning), for benchmarks that measure the tuning's effect."""
    return [
        {"path": "zero_optimization.reduce_bucket_size", "value": hidden_size * hidden_size},
        {"path": "zero_optimization.stage3_prefetch_bucket_size", "value": int(0.9 * hidden_size * hidden_size)},
        {"path": "zero_optimization.overlap_comm", "value": True},
    ]


def apply_overrides(ds_config: dict[str, Any], overrides: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``ds_config`` with each dotted-path override set."""
    import copy

    from zerogate.ds_config import set_path

    tuned = copy.deepcopy(ds_config)
    for override in overrides:
        set_path(tuned, override["path"], override["value"])
    return tuned
