"""Where ZeRO keeps a run's model states, per rank: the parameters, the fp32 master copy, the gradients and
Adam's states on the device, or offloaded to the host or NVMe with the buffers the offload adds on both sides;
and the host's own terms (the runtime, the model as built, NVMe's pinned swap buffers). Each term's source is
beside it (STATE_SOURCES, OFFLOAD_SOURCES)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from zerogate.contracts.model import ModelCounts
from zerogate.predict.host_memory import host_runtime_bytes
from zerogate.predict.setup import Setup, planned_deepspeed

FP64_BYTES = 8  # DeepSpeed's gradient norms (zero/utils.py get_norm_dtype: fp64 where the accelerator has it)
# The host terms an offload with pin_memory pins.
PINNED_TERMS = (
    "parameters",
    "gradients",
    "gradient_accumulation",
    "optimizer_gradients",
    "offload_gradient_staging",
    "offload_parameter_buffer",
)
# Host RAM terms that are not offloaded model state.
HOST_SETUP = ("host_runtime", "model_build", "nvme_swap_buffers")

# Where each model-state term comes from (the plan's Ledger.term_sources).
STATE_SOURCES = {
    "parameters": (
        "the 16-bit (fp32 on the CPU) parameters, a rank's share at stage 3, whole below it; ZeRO-3 "
        "pads each parameter to a multiple of the ranks "
        "(deepspeed/runtime/zero/partition_parameters.py)"
    ),
    "master_parameters": (
        "fp32 master copy of the rank's partition at ZeRO-1/2/3, in fp32 too: stage_1_and_2.py "
        "clones single_partition_of_fp32_groups always, and stage3.py _create_fp32_partitions reuses "
        "the partition only when its device equals self.device, a device-name string that a "
        "torch.device never equals (torch 2.13); measured on fp32 ZeRO-2 and ZeRO-3 runs (the held "
        "tensors); ZeRO-0 keeps one only for 16-bit training (runtime/fp16/fused_optimizer.py)"
    ),
    "gradients": (
        "the gradient partition (ZeRO-2/3) or every gradient (ZeRO-0/1), held for the run at ZeRO-3 "
        "and with accumulation (at ZeRO-0/1/2 without it they are window terms); with optimizer "
        "offload a flat fp32 host buffer (stage3.py grad_partitions_flat_buffer, stage_1_and_2.py "
        "pinned fp32 grad)"
    ),
    "window_gradient_partition": (
        "ZeRO-1/2 without accumulation: the reduced gradient partition (every gradient at ZeRO-1), "
        "made at the boundary and freed by the optimizer step's zero_grad (stage_1_and_2.py "
        "averaged_gradients); measured absent between steps"
    ),
    "window_gradients": (
        "ZeRO-0 without accumulation: every gradient, from the micro-step's backward until the "
        "optimizer step's zero_grad frees it (engine.py; held between steps only with accumulation > "
        "1, as gradients)"
    ),
    "gradient_accumulation": (
        "16-bit gradient accumulation partition on the host with optimizer offload and accumulation "
        "> 1: assumed from the pinned-memory figure docs/reference.md section 1 gives (+2 Phi when "
        "G > 1); not located in stage3.py"
    ),
    "optimizer_states": (
        "Adam's two fp32 moments of the rank's partition, 8 bytes per element (exp_avg and exp_avg_sq: "
        "deepspeed/ops/adam/fused_adam.py, deepspeed/ops/adam/cpu_adam.py, torch/optim/adam.py)"
    ),
    "optimizer_gradients": (
        "ZeRO-3 with optimizer offload: the fp32 gradient the optimizer steps on, one pinned host "
        "buffer per sub-group held for the run beside the accumulation buffer (stage3.py "
        "initialize_optimizer_states, subgroup_gradient_buffer as "
        "fp32_partitioned_groups_flat[i].grad); measured: the smoke run's ranks hold exactly one "
        "such partition-sized fp32 tensor more than the other terms (docs/measurements.md)"
    ),
    "model_build": (
        "the model as each rank builds it on the host before DeepSpeed moves it: whole in fp32 at "
        "ZeRO-0/1/2 (zerogate.model.build loads fp32; DeepSpeed's estimator: 4 Phi per GPU), the "
        "largest layer in fp32 under zero.Init at ZeRO-3 (the estimator's zero_init figure, 4 L: "
        "stage3.py estimate_zero3_model_states_mem_needs)"
    ),
}
# Where each term of an optimizer offload comes from.
OFFLOAD_SOURCES = {
    "offload_gradient_buffer": (
        "ZeRO-1/2 with optimizer offload: the device buffer of the largest parameter's size "
        "gradients pass through on their way to the host, held for the run (stage_1_and_2.py "
        "temp_grad_buffer_for_gpu_offload)"
    ),
    "offload_gradient_conversion": (
        "ZeRO-1/2 with optimizer offload: as a bucket is reduced, each gradient slice in the rank's "
        "partition is copied to fp64 on the device for its norm (stage_1_and_2.py "
        "copy_grads_in_partition -> set_norm_for_param_grad_in_gpu: .to(get_norm_dtype()), fp64 on "
        "every accelerator that has it, CPU and CUDA: zero/utils.py), then, in 16-bit training, to "
        "fp32 before its copy to the host (async_inplace_copy_grad_to_fp32_buffer_from_gpu); one "
        "after the other, each freed before the next: the fp64 copy, 8 bytes per element of at most "
        "the largest parameter's slice; at the accumulation boundary, where the last bucket is "
        "reduced beside the buckets, after the backward"
    ),
    "offload_gradient_device_copies": (
        "ZeRO-3 with optimizer offload on CUDA: as a bucket is reduced, each gradient partition is copied "
        "into the fp32 host buffer and back to the device, and the device copies are kept until the "
        "bucket's partitioning ends (stage3.py partition_grads: grad_buffer.to(grad_partition.device), "
        "appended to the returned buffers): 4 bytes per element of the rank's share of a bucket, or of "
        "the largest layer where that is reduced alone; at the accumulation boundary, after the "
        "backward; none on the CPU accelerator, where .to() of a host tensor is the tensor itself"
    ),
    "zero3_offload_gradient_norm": (
        "ZeRO-3 with optimizer offload: at the accumulation boundary each gradient partition's norm is "
        "taken on an fp64 copy, at most 250,000,000 elements at a time (stage3.py "
        "_offload_grad_partition_at_boundary -> _constant_buffered_norm2: part.to(get_norm_dtype()), "
        "fp64 where the accelerator has it: zero/utils.py), then converted to fp32 for the host "
        "(.to(dtype=master_weights_and_grads_dtype), the buffer itself when it is fp32), each freed "
        "before the next: 8 bytes per element of the largest layer's partition, beside its device copy"
    ),
    "offload_gradient_device_copies_in_backward": (
        "the same device copies inside the backward, beside what is left of the activations, when the "
        "model is larger than one bucket: a bucket that fills is reduced when the next gradient arrives "
        "(stage3.py reduce_independent_p_g_buckets_and_remove_grads -> __reduce_and_partition_ipg_grads), "
        "planned at the bucket's size (a parameter larger than the bucket, reduced alone inside the "
        "backward, is not planned larger)"
    ),
    "zero3_offload_gradient_norm_in_backward": (
        "the same fp64 norm copy (stage3.py _constant_buffered_norm2) inside the backward when the model "
        "is larger than one bucket, of at most a bucket's partition (as "
        "offload_gradient_device_copies_in_backward)"
    ),
    "offload_gradient_conversion_in_backward": (
        "the same copies inside the backward, beside what is left of the activations, when the model "
        "is larger than one bucket (a bucket that fills is reduced at once: stage_1_and_2.py "
        "reduce_independent_p_g_buckets_and_remove_grads)"
    ),
    "offload_overflow_check": (
        "ZeRO-1/2 with optimizer offload, planned for a DeepSpeed before 0.19.6: right after a "
        "gradient's fp64 norm copy is freed, its overflow check tests the parameter's whole gradient "
        "elementwise (stage_1_and_2.py copy_grads_in_partition -> "
        "update_offload_overflow_tracker_for_param_grad -> _has_inf_or_nan; from 0.13.3 an fp32 "
        "copy, three boolean masks and a second fp32 tensor at once, 11 bytes per element of the "
        "largest parameter in 16-bit, before it the fp32 copy alone: "
        "overflow_check_bytes_per_element); the term is what that needs above the fp64 copy, in the "
        "phases the copy is in. None from 0.19.6 (PR #8325), whose check reduces to two scalars "
        "(runtime/utils.py has_inf_or_nan)"
    ),
    "offload_overflow_check_in_backward": (
        "the same check inside the backward, where the copies are (stage_1_and_2.py "
        "reduce_independent_p_g_buckets_and_remove_grads)"
    ),
    "offload_gradient_staging": (
        "ZeRO-1/2 with optimizer offload: the host buffer of the largest parameter's size (pinned "
        "with pin_memory), held for the run (stage_1_and_2.py temp_grad_buffer_for_cpu_offload)"
    ),
    "offload_parameter_buffer": (
        "ZeRO-1/2 with optimizer offload: a host buffer of the rank's partition in the parameters' "
        "dtype that the updated master is copied through to the device, held for the run "
        "(stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, pinned with pin_memory)"
    ),
    "nvme_swap_buffers": (
        "pinned host buffers of NVMe offload: buffer_count x buffer_size parameter elements "
        "(swap_tensor/partitioned_param_swapper.py) and buffer_count x the largest sub-group of fp32 "
        "optimizer elements (swap_tensor/optimizer_utils.py SwapBufferManager)"
    ),
}


@dataclass
class Tiers:
    """One rank's terms in each memory tier, bytes, in the order they were found."""

    device: dict[str, int] = field(default_factory=dict)
    host: dict[str, int] = field(default_factory=dict)
    nvme: dict[str, int] = field(default_factory=dict)


def rank_share(counts: ModelCounts, setup: Setup) -> int:
    """One rank's share of the elements. ZeRO-3 pads every parameter to a multiple of the ranks; ZeRO-1/2 pad
    the flat group."""
    if setup.stage == 3:
        return counts.partition_numel(setup.ranks)
    return math.ceil(counts.total / setup.ranks)


def model_state_terms(counts: ModelCounts, setup: Setup, share: int) -> Tiers:
    """Where the rank's parameters, gradients and optimizer states are, with the buffers an optimizer offload
    adds (``share``: the rank's elements, :func:`rank_share`)."""
    tiers = Tiers()
    b = setup.dtype_bytes
    if setup.offload_param:
        (tiers.nvme if setup.nvme_param else tiers.host)["parameters"] = b * share
    else:
        tiers.device["parameters"] = b * (counts.total if setup.stage < 3 else share)
    if setup.offload_optimizer:
        add_offloaded_optimizer(tiers, counts, setup, share)
    else:
        tiers.device.update(device_gradient_terms(counts, setup, share))
        tiers.device.update(optimizer_state_terms(counts, setup, share))
    return tiers


def optimizer_state_terms(counts: ModelCounts, setup: Setup, share: int) -> dict[str, int]:
    """The fp32 master copy and Adam's two moments: of the rank's partition at ZeRO-1/2/3, of the whole model
    at ZeRO-0. ZeRO-1/2/3 always keep a separate master partition; ZeRO-0 only for 16-bit training."""
    master = 0 if (setup.dtype_bytes == 4 and setup.stage == 0) else 4
    elements = share if setup.stage >= 1 else counts.total
    return {"master_parameters": master * elements, "optimizer_states": 8 * elements}


def device_gradient_terms(counts: ModelCounts, setup: Setup, share: int) -> dict[str, int]:
    """The gradients on the device: every one at ZeRO-0/1, the partition at ZeRO-2/3. Without accumulation
    ZeRO-0's gradients live from the backward, ZeRO-1/2's reduced partitions from the boundary, to the
    optimizer step's end (window terms); ZeRO-3 accumulates into a buffer held for the run."""
    window = {0: "window_gradients", 1: "window_gradient_partition", 2: "window_gradient_partition"}
    name = window[setup.stage] if setup.accumulation == 1 and setup.stage < 3 else "gradients"
    return {name: setup.dtype_bytes * (counts.total if setup.stage < 2 else share)}


def add_offloaded_optimizer(tiers: Tiers, counts: ModelCounts, setup: Setup, share: int) -> None:
    """An optimizer offload's terms: the gradient partitions in a flat fp32 host buffer (stage3
    grad_partitions_flat_buffer), the master and Adam's states on the host or NVMe, ZeRO-3's fp32 optimizer
    gradient, the 16-bit accumulation partition, and ZeRO-1/2's transfer buffers."""
    b = setup.dtype_bytes
    tiers.host["gradients"] = 4 * share
    (tiers.nvme if setup.nvme_optimizer else tiers.host).update(optimizer_state_terms(counts, setup, share))
    if setup.stage == 3 and not setup.nvme_optimizer:
        tiers.host["optimizer_gradients"] = 4 * share
        tiers.device.update(stage3_offload_gradient_terms(counts, setup))
    if setup.accumulation > 1 and b < 4:
        tiers.host["gradient_accumulation"] = b * share
    if setup.stage in (1, 2):
        tiers.device["offload_gradient_buffer"] = b * counts.largest_layer
        tiers.host["offload_gradient_staging"] = b * counts.largest_layer
        tiers.host["offload_parameter_buffer"] = b * share
        tiers.device.update(gradient_conversion_terms(counts, setup, share))


def overflow_check_bytes_per_element(deepspeed: tuple[int, ...], dtype_bytes: int) -> int:
    """What ZeRO-1/2's inf/NaN test of one gradient (stage_1_and_2.py _has_inf_or_nan) holds at once, per
    element, in that DeepSpeed release: before 0.13.3, float(x.float().sum()), the fp32 copy of a 16-bit
    gradient (an fp32 one is its own); from 0.13.3 (PR #5115), x.float(), isnan, isinf, their logical_or and
    that as float, alive together (+ 1 + 1 + 1 + 4 bytes); from 0.19.6 (PR #8325), a max and a min reduction
    to scalars first (runtime/utils.py has_inf_or_nan), nothing per element."""
    if deepspeed >= (0, 19, 6):
        return 0
    upcast = 0 if dtype_bytes == 4 else 4
    return upcast if deepspeed < (0, 13, 3) else upcast + 3 + 4


def gradient_conversion_terms(counts: ModelCounts, setup: Setup, share: int) -> dict[str, int]:
    """ZeRO-1/2's copies of a gradient slice on its way to the host (OFFLOAD_SOURCES): the fp64 norm copy and
    the fp32 conversion come one after the other, so the larger, 8 bytes per element; right after the fp64
    copy, the overflow check needs what it holds above that copy (none in the installed release); inside the
    backward too where the model is larger than one bucket."""
    conversion = FP64_BYTES * min(counts.largest_layer, share)
    terms = {"offload_gradient_conversion": conversion}
    check = (
        overflow_check_bytes_per_element(planned_deepspeed(setup), setup.dtype_bytes) * counts.largest_layer
    )
    if check > conversion:
        terms["offload_overflow_check"] = check - conversion
    if counts.total > setup.reduce_bucket:
        terms["offload_gradient_conversion_in_backward"] = conversion
        if "offload_overflow_check" in terms:
            terms["offload_overflow_check_in_backward"] = terms["offload_overflow_check"]
    return terms


# The elements ZeRO-3's gradient norm upcasts at a time (stage3.py _constant_buffered_norm2's buffer_size).
NORM_SPLIT_ELEMENTS = 250_000_000


def stage3_offload_gradient_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """ZeRO-3's gradient partitions on their way to the host buffer (OFFLOAD_SOURCES): the device copies of a
    reduced bucket's partitions (CUDA only) and, beside them, the fp64 norm copy of one partition; inside the
    backward too where the model is larger than one bucket. Optimizer offload to NVMe swaps the gradients
    out another way (stage3.py _swap_out_offload_fp32_gradients) and is not planned here."""
    bucket = min(counts.total, setup.reduce_bucket)
    terms = {}
    # At the boundary: the last reduction, the largest layer's (the input embedding's in a decoder) alone
    # where it is larger than a bucket; in the backward: a bucket that fills.
    units = {"": max(bucket, counts.largest_layer)}
    if counts.total > setup.reduce_bucket:
        units["_in_backward"] = bucket
    largest_share = -(-counts.largest_layer // setup.ranks)
    for suffix, elements in units.items():
        share = -(-elements // setup.ranks)
        norm_elements = min(share, largest_share, NORM_SPLIT_ELEMENTS)
        terms[f"zero3_offload_gradient_norm{suffix}"] = FP64_BYTES * norm_elements
        if setup.device_kind == "cuda":
            terms[f"offload_gradient_device_copies{suffix}"] = 4 * share
    return terms


def nvme_swap_bytes(setup: Setup, share: int) -> int:
    """The pinned host buffers of an NVMe offload (OFFLOAD_SOURCES["nvme_swap_buffers"]), bytes."""
    swap = 0
    if setup.nvme_param:
        swap += setup.param_swap_buffer_count * setup.param_swap_buffer_size * setup.dtype_bytes
    if setup.nvme_optimizer:
        swap += setup.optimizer_swap_buffer_count * min(share, setup.sub_group_size) * 4
    return swap


def host_setup_terms(counts: ModelCounts, setup: Setup, swap: int) -> dict[str, int]:
    """The host terms that are not offloaded model state (HOST_SETUP): NVMe's swap buffers (``swap`` bytes,
    :func:`nvme_swap_bytes`), the rank's runtime and the model as it builds it."""
    terms = {"nvme_swap_buffers": swap} if swap else {}
    terms["host_runtime"] = host_runtime_bytes(setup)
    terms["model_build"] = 4 * (counts.largest_layer if setup.stage == 3 else counts.total)
    return terms


def pinned_terms(host_states: dict[str, int], setup: Setup, swap: int) -> dict[str, int]:
    """The pinned share of the host's terms: the offloaded states and buffers an offload with pin_memory pins
    (PINNED_TERMS of ``host_states``), and NVMe's swap buffers."""
    pinned = {k: v for k, v in host_states.items() if k in PINNED_TERMS} if setup.pin_memory else {}
    if swap:
        pinned["nvme_swap_buffers"] = swap
    return pinned
