"""Communication settings that make ZeRO-3 fast on DeepSpeed's CPU accelerator, as overrides with reasons.

Found by profiling the default run with py-spy and by counting its collectives:
- the "auto" rule hidden_size^2 gives the 0.13 M-parameter default model 4096-element buckets, so every
  micro-step's backward ran about 30 gloo reduce-scatters; DeepSpeed's default buckets make it one;
- overlap_comm has no streams to overlap on with the CPU accelerator (measured slower with it on);
- ZeRO-3 releases every parameter after the forward and the backward gathers them again one module at a
  time, unprefetched: 17 gloo all-gathers per micro-step, each a rendezvous of both ranks. Declaring the
  decoder layer a ZeRO-3 leaf module (DeepSpeed's ``zero_optimization.leaf_module``) gathers a layer's
  parameters in one call and installs no hooks on its children: 4 backward gathers per micro-step, and
  the median step fell from about 0.36 s to about 0.20 s (interleaved runs, README "Measured").
Stage, offloads, partitioning and batch geometry stay the claim's; the leaf setting makes one decoder
layer the unit a rank holds gathered (a working set the ledger counts) and moved the loss by at most
2.4e-7 over 40 steps (fp32 summation order).

Applied by zerogate.render.ds_config.render on the CPU accelerator, each recorded as a deviation that does not
change the experiment; GPU runs keep the claim's settings. zerogate.bench.ddp_vs_zero3 measures the
config with and without them. The decoder layer classes are transformers' own, so this module loads
transformers (the DAG build never imports it); the bucket sizes and the default leaf classes are DeepSpeed's
(zerogate.render.deepspeed_defaults).
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from zerogate.render.deepspeed_defaults import deepspeed_defaults


def decoder_layer_classes(architecture: str) -> list[str]:
    """The transformers classes of a model type's decoder layer (its causal LM's ``_no_split_modules``: the
    blocks Accelerate and FSDP also treat as units), for any architecture AutoModelForCausalLM builds."""
    return list(
        getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[architecture])._no_split_modules or []
    )


def leaf_module_classes(architecture: str) -> list[str]:
    """DeepSpeed's own default leaf classes (MoE blocks) plus the family's decoder layer."""
    return [*deepspeed_defaults().leaf_module_classes, *decoder_layer_classes(architecture)]


def cpu_comm_overrides(architecture: str | None) -> list[dict[str, Any]]:
    """The CPU tuning for a model of ``architecture`` (a transformers model type: llama, qwen2, gpt2...); None
    (a model whose family the profile does not state) leaves out the leaf-module setting, which names the
    family's layer class."""
    defaults = deepspeed_defaults()
    overrides = [
        {
            "path": "zero_optimization.reduce_bucket_size",
            "value": defaults.reduce_bucket_size,
            "reason": "DeepSpeed's default 5e8 elements: one gloo reduce-scatter per micro-step instead of "
            "one per "
            "hidden_size^2 elements",
        },
        {
            "path": "zero_optimization.stage3_prefetch_bucket_size",
            "value": defaults.prefetch_bucket_size,
            "reason": "DeepSpeed's default 5e7 elements: fewer, larger all-gathers",
        },
        {
            "path": "zero_optimization.overlap_comm",
            "value": False,
            "reason": "the CPU accelerator has no streams to overlap communication on; measured slower with "
            "it on",
        },
    ]
    if architecture is not None:
        overrides.append(
            {
                "path": "zero_optimization.leaf_module.classes",
                "value": leaf_module_classes(architecture),
                "reason": "the decoder layer is one ZeRO-3 fetch unit (DeepSpeed leaf module): one "
                "all-gather per "
                "layer instead of one per linear layer; partitioning unchanged, one layer held gathered",
            }
        )
    return overrides


def untuned_overrides(hidden_size: int) -> list[dict[str, Any]]:
    """The same keys as the Hugging Face "auto" rule, the claim and DeepSpeed's defaults set them (what
    the CPU path ran with before the tuning), for benchmarks that measure the tuning's effect."""
    return [
        {"path": "zero_optimization.reduce_bucket_size", "value": hidden_size * hidden_size},
        {
            "path": "zero_optimization.stage3_prefetch_bucket_size",
            "value": int(0.9 * hidden_size * hidden_size),
        },
        {"path": "zero_optimization.overlap_comm", "value": True},
        {
            "path": "zero_optimization.leaf_module.classes",
            "value": list(deepspeed_defaults().leaf_module_classes),
        },
    ]
