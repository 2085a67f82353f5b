"""What ZeRO allocates around the model states, per rank: ZeRO-3's gathered parameters and its reduction of
the gradient bucket, ZeRO-1/2's gradient reduction buckets, ZeRO-0's flat all-reduce buffer, the gradients
of the backward before they are reduced, and the optimizer step's fp32 gradient copy. Each term's source is
beside it (BUFFER_SOURCES)."""

from __future__ import annotations

import functools

from zerogate.contracts.model import ModelCounts
from zerogate.predict.activation_figures import ActivationFigures
from zerogate.predict.fetch_trace import zero3_most_gathered
from zerogate.predict.setup import Setup, planned_deepspeed
from zerogate.render.deepspeed_defaults import ZERO0_ALLREDUCE_ELEMENTS

# On one rank ZeRO-3 gathers nothing (the gathered terms' sources end with this).
SINGLE_RANK_FETCH = (
    "; on one rank nothing is gathered: all_gather_coalesced hands parameters whose partition group has one "
    "rank to _no_gather_coalesced, whose handle sets param.data = ds_tensor.data.to(device) "
    "(deepspeed/runtime/zero/partition_parameters.py NoGatherCoalescedHandle), the partition itself where it "
    "lives on the device (no buffer, no copy: measured on the CPU accelerator, docs/measurements.md), its "
    "device copy with parameter offload on CUDA, counted as the gathered parameters' copies"
)

# Where each of these terms comes from (the plan's Ledger.term_sources).
BUFFER_SOURCES = {
    "persistent_parameters": (
        "parameters at or below stage3_param_persistence_threshold, kept whole on every rank "
        "(partition_parameters.py ds_persist)"
    ),
    "gathered_parameters": (
        "ZeRO-3's coalesced fetch: the flat buffer of its all-gather, what the fetch trace keeps gathered at "
        "once (parameters used again within stage3_max_reuse_distance stay gathered, "
        "partitioned_param_coordinator.py __params_to_release; zerogate.predict.fetch_trace.zero3_trace) "
        "plus the prefetch bucket, which stage3_max_live_parameters caps (partitioned_param_coordinator.py "
        "fetch_sub_module), at most the model; alive from the forward's start until the fetch's last "
        "parameter is used (partition_parameters.py AllGatherCoalescedHandle.wait)" + SINGLE_RANK_FETCH
    ),
    "gathered_parameter_copies": (
        "ZeRO-3: each gathered parameter's own copy out of the coalesced fetch's flat buffer "
        "(partition_parameters.py: param.data = torch.cat(partitions)), made for every parameter of the "
        "fetch at once when its first is waited (measured: 2 x the fetch at the forward's start, 455.1 MB "
        "on a 227.6 MB model); a copy the fetch trace keeps for reuse is not released after its module's "
        "forward (partitioned_param_coordinator.py release_sub_module, __params_to_release) and lives into "
        "the backward until that module's backward releases it" + SINGLE_RANK_FETCH
    ),
    "offloaded_partition_copies": (
        "ZeRO-3 with parameter offload on CUDA: each offloaded partition of a fetch copied to the device "
        "before the gather, all of them at once (deepspeed/runtime/zero/partition_parameters.py "
        "_all_gather_dtype: torch.cat([p.ds_tensor.to(current_device) ...], out=...)), the rank's share of "
        "the gathered set; on the CPU accelerator .to() of a host tensor is the tensor itself"
    ),
    "reduce_bucket": (
        "ZeRO-3's contiguous gradient bucket, torch.empty(reduce_bucket_size) per parameter dtype at "
        "optimizer init, held for the run (stage3.py ipg_buckets buffer)"
    ),
    "reduce_scatter_buffer": (
        "ZeRO-3's reduction of its gradient bucket: the bucket's gradients interleaved into one flat "
        "buffer, at most reduce_bucket_size elements (runtime/comm/coalesced_collectives.py "
        "reduce_scatter_coalesced, torch.cat); after the backward, or inside it when the model is "
        "larger than one bucket"
    ),
    "reduce_scatter_cpu_copy": (
        "on the CPU accelerator a second flat copy while the reduce-scatter runs (measured on gloo: "
        "its reduce-scatter splits the buffer into new storage); not assumed on GPUs"
    ),
    "reduce_scatter_in_backward": (
        "ZeRO-3 with a model larger than one bucket: a bucket fills and is reduced inside the "
        "backward, its flat buffer (and on the CPU its copy) beside what is left of the activations "
        "(stage3.py reduce_independent_p_g_buckets_and_remove_grads -> __reduce_and_partition_ipg_grads "
        "when the bucket is full)"
    ),
    "last_gradient": (
        "ZeRO-3: the gradient whose hook starts the final bucket reduction, held until it ends "
        "(stage3.py reduce_ready_partitions_and_remove_grads; the input embedding's in a decoder); the "
        "largest layer's at most"
    ),
    "gradient_reduction_buckets": (
        "ZeRO-1/2's gradient reduction buckets, torch.empty(reduce_bucket_size) at the micro-step's "
        "first accumulated gradient, two with overlap_comm (stage_1_and_2.py process_gradients -> "
        "setup_buckets), alive through the optimizer step (measured)"
    ),
    "gradient_reduction_buckets_per_backward": (
        "ZeRO-2's gradient reduction buckets planned for a DeepSpeed from 0.3.0 to 0.3.16, in place "
        "of gradient_reduction_buckets: each holds 4.5 x reduce_bucket_size elements "
        "(reduction_bucket_factor), allocated before each loss backward (stage2.py backward, "
        "https://github.com/deepspeedai/DeepSpeed/blob/v0.3.16/deepspeed/runtime/zero/stage2.py) and "
        "released at its end (independent_gradient_partition_epilogue -> _release_ipg_buffers), so "
        "not in the optimizer step. That release allocates them only with contiguous_gradients, "
        "which its cpu_offload forces; the ledger does not read contiguous_gradients"
    ),
    "allreduce_flat_buffer": (
        "ZeRO-0's flattened all-reduce bucket, made at the accumulation boundary after the backward "
        "(engine.py allreduce_gradients -> buffered_allreduce_fallback: flatten of at most 5e8 "
        "elements, reduced, copied back)"
    ),
    "largest_layer_gradient": (
        "the largest layer's full gradient before it is reduced into the partitions (ZeRO-2/3: "
        "stage3.py reduce_ready_partitions_and_remove_grads, stage_1_and_2.py "
        "reduce_ready_partitions_and_remove_grads; FSDP2's unit: torch/distributed/fsdp/_fully_shard/"
        "_fsdp_collectives.py foreach_reduce) where the backward is not traced with its weight gradients"
    ),
    "tied_weight_gradient": (
        "with tied input and output embeddings, the output embedding's gradient contribution, "
        "computed first in the backward and held by autograd until the input embedding's arrives at "
        "the backward's end, when the two are summed into the one gradient the other gradient terms "
        "count (torch/csrc/autograd/input_buffer.h: the InputBuffer accumulates a gradient used "
        "twice; AccumulateGrad, and DeepSpeed's gradient hook on it, runs once on the sum); where "
        "the backward is traced, the trace holds it"
    ),
    "fp32_gradient_copy": (
        "the optimizer step's fp32 copy of the gradients: ZeRO-0 with 16-bit training flattens a "
        "per-parameter fp32 copy of every gradient into one more (4 Phi + 4 Phi while both live, "
        "runtime/fp16/fused_optimizer.py step); ZeRO-1/2 flatten the partition and convert it (b + 4 "
        "bytes per element of Phi/N, stage_1_and_2.py step); ZeRO-3 the same per sub-group of "
        "sub_group_size elements (stage3.py _prepare_fp32_grad_for_sub_group); none on the device "
        "with optimizer offload (optimizer_gradients, on the host, is the copy)"
    ),
    "loss_shifted_logits": (
        "a run that states a transformers release before the shifted-logits copy was removed: its causal-LM "
        "loss copies the upcast logits shifted by one, logits[..., :-1, :].contiguous(), beside them at the "
        "forward's end (removed by https://github.com/huggingface/transformers/pull/35646, merged "
        "2025-01-13; first absent in 4.49: assumed from the release dates); the installed release pads the "
        "labels instead (transformers/loss/loss_utils.py ForCausalLMLoss), and the trace runs that loss"
    ),
    "optimizer_step_temporaries": (
        "CUDA, torch's Adam/AdamW stepping the device partition (the config names no optimizer, or "
        "torch_adam: deepspeed/runtime/engine.py get_optimizer_configuration): its foreach path, the "
        "default on CUDA (torch/optim/optimizer.py _default_to_fused_or_foreach), makes "
        "exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), an fp32 copy of the second moment of what "
        "one step updates (torch/optim/adam.py _multi_tensor_adam; ZeRO-3 steps one sub-group at a "
        "time, stage3.py _optimizer_step); low 0: fused=True updates in place (adam.py _fused_adam)"
    ),
}


@functools.lru_cache(maxsize=256)
def gathered_elements(counts: ModelCounts, setup: Setup) -> int:
    """Elements ZeRO-3 holds gathered at once: its fetch trace's most (reuse distance), plus the prefetch
    bucket as far as stage3_max_live_parameters lets it prefetch, at most the model."""
    held = zero3_most_gathered(
        counts, setup.ranks, setup.persistence_threshold, setup.max_reuse_distance, setup.leaf_blocks
    )
    prefetch = min(setup.prefetch_bucket, max(0, setup.max_live_parameters - held))
    return min(counts.total, held + prefetch)


def reduce_scatter_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """ZeRO-3's bucket reduction (BUFFER_SOURCES: reduce_scatter_buffer, reduce_scatter_cpu_copy,
    last_gradient, reduce_scatter_in_backward), bytes."""
    b = setup.dtype_bytes
    flat = b * min(counts.total, setup.reduce_bucket)
    terms = {"reduce_scatter_buffer": flat, "last_gradient": b * counts.largest_layer}
    if setup.device_kind == "cpu":
        terms["reduce_scatter_cpu_copy"] = flat
    if counts.total > setup.reduce_bucket:
        terms["reduce_scatter_in_backward"] = flat + terms.get("reduce_scatter_cpu_copy", 0)
    return terms


def reduction_bucket_factor(deepspeed: tuple[int, ...]) -> float:
    """How many times reduce_bucket_size elements each of ZeRO-2's gradient reduction buckets holds in that
    DeepSpeed release: 4.5 from 0.3.0 (the ZeRO-Offload release, PR #391) to 0.3.16, whose stage2.py backward
    allocates torch.empty(int(self.reduce_bucket_size * 4.5)) per bucket ("TODO: we need to revist this and
    remove the magic 4.5x multiplier here"); 1 before (0.2.0's deepspeed_zero_optimizer.py) and from 0.4.0
    (PR #1042, "ZeRO stage 1 refresh")."""
    return 4.5 if (0, 3, 0) <= deepspeed < (0, 4, 0) else 1.0


def stage3_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """ZeRO-3's buffers: the persistent small parameters, the gathered working set, each gathered
    parameter's copy, the contiguous gradient bucket and its reduction; on CUDA with
    parameter offload the device copies of the offloaded partitions a fetch gathers. On one rank nothing is
    gathered (SINGLE_RANK_FETCH): a parameter is its partition, or with parameter offload
    on CUDA that partition's device copy."""
    b = setup.dtype_bytes
    elements = gathered_elements(counts, setup)
    device_copies = setup.offload_param and setup.device_kind == "cuda"
    gathers = setup.ranks > 1
    terms = {
        "persistent_parameters": b * counts.persistent_numel(setup.persistence_threshold),
        "gathered_parameters": b * elements if gathers else 0,
        "gathered_parameter_copies": b * elements if gathers or device_copies else 0,
        "reduce_bucket": b * setup.reduce_bucket,
        **reduce_scatter_terms(counts, setup),
    }
    if device_copies and gathers:
        terms["offloaded_partition_copies"] = b * -(-elements // setup.ranks)
    return terms


def reduction_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """The stage's gradient reduction (and at ZeRO-3 gathering) buffers: ZeRO-3's (:func:`stage3_terms`),
    ZeRO-1/2's reduction buckets (two with overlap_comm; before 0.4.0 ZeRO-1 was another optimizer,
    zero/stage1.py, so the factor is stage2.py's), ZeRO-0's flat all-reduce bucket (at most DeepSpeed's
    MEMORY_OPT_ALLREDUCE_SIZE elements)."""
    b = setup.dtype_bytes
    if setup.stage == 3:
        return stage3_terms(counts, setup)
    if setup.stage == 0:
        return {"allreduce_flat_buffer": b * min(counts.total, ZERO0_ALLREDUCE_ELEMENTS)}
    buckets = 2 if setup.overlap_comm else 1
    factor = reduction_bucket_factor(planned_deepspeed(setup)) if setup.stage == 2 else 1.0
    if factor == 1.0:
        return {"gradient_reduction_buckets": buckets * b * setup.reduce_bucket}
    return {"gradient_reduction_buckets_per_backward": buckets * b * int(factor * setup.reduce_bucket)}


def backward_gradient_terms(counts: ModelCounts, setup: Setup, figures: ActivationFigures) -> dict[str, int]:
    """The gradients the backward holds before they are reduced: the largest layer's (ZeRO-2/3) and a tied
    weight's output-embedding part. Where the backward is traced with its weight gradients in flight
    (``figures``), the trace holds them and they are no terms of their own."""
    if figures.weight_gradients_traced:
        return {}
    b = setup.dtype_bytes
    terms = {"largest_layer_gradient": b * counts.largest_layer} if setup.stage >= 2 else {}
    if counts.tied_embeddings:
        terms["tied_weight_gradient"] = b * counts.vocab * counts.hidden
    return terms


def fp32_gradient_copy_bytes(counts: ModelCounts, setup: Setup, share: int) -> int:
    """The optimizer step's fp32 gradient copy on the device (BUFFER_SOURCES['fp32_gradient_copy']);
    ``share``: the rank's elements."""
    b = setup.dtype_bytes
    if setup.offload_optimizer:
        return 0
    if setup.stage == 0:
        # fused_optimizer.py: _flatten_dense_tensors([p.grad.to(fp32) ...]); a plain fp32 optimizer copies
        # nothing.
        return 8 * counts.total if b < 4 else 0
    # flatten(partition) then .to(fp32): both alive while converting; in fp32 .to is the flattened tensor
    # itself.
    per_element = 4 + b if b < 4 else 4
    elements = min(share, setup.sub_group_size) if setup.stage == 3 else share
    return per_element * elements


def optimizer_step_temporaries(counts: ModelCounts, setup: Setup, share: int) -> dict[str, int]:
    """torch's foreach Adam/AdamW's fp32 temporary of what one step updates, on CUDA without optimizer offload
    (BUFFER_SOURCES["optimizer_step_temporaries"]); ``share``: the rank's elements. DeepSpeed's own
    optimizers (FusedAdam, CPU Adam) make none per element."""
    if setup.device_kind != "cuda" or setup.offload_optimizer or not setup.torch_optimizer:
        return {}
    elements = {0: counts.total, 3: min(share, setup.sub_group_size)}.get(setup.stage, share)
    return {"optimizer_step_temporaries": 4 * elements}


# The first transformers release whose causal-LM loss makes no shifted copy of the logits
# (BUFFER_SOURCES["loss_shifted_logits"]: PR 35646, merged 2025-01-13; assumed from the release dates).
TRANSFORMERS_WITHOUT_SHIFT_COPY = (4, 49)


def loss_logits_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """The loss's shifted copy of the logits for a run that states an older transformers release
    (BUFFER_SOURCES["loss_shifted_logits"]), bytes: micro-batch x (sequence - 1) x vocabulary elements in the
    loss's dtype. None for the installed release (the activation trace runs its loss)."""
    version = setup.transformers_version
    if version is None or version >= TRANSFORMERS_WITHOUT_SHIFT_COPY:
        return {}
    element = 4 if setup.loss_in_fp32 else setup.dtype_bytes
    return {"loss_shifted_logits": element * setup.micro_batch * (setup.seq_len - 1) * counts.vocab}
