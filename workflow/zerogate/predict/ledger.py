"""The memory ledger: what each rank and each host needs, three ways, for every ZeRO scheme.

(a) ``paper``: the ZeRO paper's model-state formulas (Rajbhandari et al. 2020, K = 12 bytes/param of fp32
    Adam state; docs/reference.md section 1), as the claim quotes them.
(b) ``deepspeed``: DeepSpeed's own estimators, called (never re-typed) on the same counts.
(c) ``zerogate``: every tensor DeepSpeed 0.19 allocates for the run, each term named with where it comes
    from (:data:`TERM_SOURCES`: a DeepSpeed source file, a measurement, or a stated assumption): model
    states (per-parameter partition padding included), the fp32 gradient copies of the optimizer step,
    gathered parameters (reuse distance, live-parameter limit, prefetch bucket), the gradient buckets, the
    activations and backward transients of one micro-step (traced from the architecture,
    zerogate.predict.activations; the Korthikanti formula is kept beside it as a cross-check), then what is
    not a tensor: the CUDA caching allocator's margin, the CUDA context and the communicator's buffers.
    Host RAM per node (the runtime, the model as built at initialisation, offloaded state, pinned buffers)
    and NVMe (offload device nvme) are tiers of their own.

A device's terms fall into phases that do not coexist (:data:`PHASES`): what is held for the whole run
(``PERSISTENT``), then, one after the other, the forward's start (ZeRO-3's coalesced fetch and every
parameter's copy out of it), the forward's end (the fetch, the running module's copy and the activations),
the backward up to its first accumulated gradient (the activations and the backward's
transient), the backward from then on (ZeRO-1/2's reduction buckets, allocated at that first gradient, beside
what is left of the activations), the reduction at the accumulation boundary after the backward and the
optimizer step. A term may sit in several phases (the activations in the forward and the backward). The
gradients of a window of one micro-step (ZeRO-0's, and ZeRO-1/2's reduced partitions) exist only from the
backward or the boundary to the step's end. The tensor peak is the persistent terms plus the largest phase
(:func:`transient_bytes`).

Parameter counts come from the model's config instantiated on the meta device: no weights, so a 14B model
is counted in seconds. Every figure is in bytes (printed by zerogate.units.format_bytes, GiB and GB side by
side).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerogate.model.counts import ModelCounts
from zerogate.predict.fetch_trace import zero3_most_gathered
from zerogate.predict.setup import SCHEMES, ZERO0_ALLREDUCE_ELEMENTS, Setup, planned_deepspeed
from zerogate.units import GIB

FP64_BYTES = 8  # DeepSpeed's gradient norms (zero/utils.py get_norm_dtype: fp64 where the accelerator has it)

# --- The terms that are not a model's tensors, each a measurement or a stated assumption
# ----------------------
# CUDA context + cuBLAS workspaces per GPU process: 0.3-0.6 GiB measured by users (docs/reference.md section
# 1);
# the upper end, so that a "fits" verdict is not optimistic.
CUDA_CONTEXT_BYTES = int(0.6 * GIB)
# NCCL's communicator buffers on the device: 1.6 GB per GPU was published for one communicator after an
# all-reduce, CUDA context included (NVIDIA/nccl issue 864); the buffers are that less the context term.
# NCCL's memory grows with its channels (issue 986: linear in the channels), so a PCIe box likely needs less.
NCCL_PUBLISHED_DEVICE_BYTES = int(1.6e9)
COMMUNICATOR_BYTES = NCCL_PUBLISHED_DEVICE_BYTES - CUDA_CONTEXT_BYTES
# The CUDA caching allocator reserves more than the tensors it holds (block rounding, fragmentation): a
# DeepSpeed memory line of a real run reads Max_MA 19.52 GB, Max_CA 21 GB (docs/reference.md section 3),
# 7.6 % above the tensor peak. A stated assumption from one published line, to be checked on a GPU run.
ALLOCATOR_MARGIN = 21.0 / 19.52 - 1.0
# Host RAM of one rank's runtime (interpreter, torch, DeepSpeed, transformers, the comm backend) before any
# model: on the CPU accelerator measured here by zerogate.runtime.baseline (0.55 GB on the smoke profile,
# 2026-12-01; the CPU peak prediction measures it for each run); on GPUs the CUDA libraries' host memory comes
# on top, assumed 2 GiB per rank in all (not measured: no GPU here).
HOST_RUNTIME_BYTES = {"cpu": int(0.6 * GIB), "cuda": 2 * GIB}

TERM_SOURCES = {
    "parameters": "the 16-bit (fp32 on the CPU) parameters, a rank's share at stage 3, whole below it; "
    "ZeRO-3 pads "
    "each parameter to a multiple of the ranks (deepspeed/runtime/zero/partition_parameters.py)",
    "master_parameters": "fp32 master copy of the rank's partition at ZeRO-1/2/3, in fp32 too: "
    "stage_1_and_2.py "
    "clones single_partition_of_fp32_groups always, and stage3.py _create_fp32_partitions reuses "
    "the partition only when its device equals self.device, a device-name string that a "
    "torch.device never equals (torch 2.13); measured on fp32 ZeRO-2 and ZeRO-3 runs (the held "
    "tensors); ZeRO-0 keeps one only for 16-bit training (runtime/fp16/fused_optimizer.py)",
    "gradients": "the gradient partition (ZeRO-2/3) or every gradient (ZeRO-0/1), held for the run at ZeRO-3 "
    "and "
    "with accumulation (at ZeRO-0/1/2 without it they are window terms); with optimizer offload a "
    "flat fp32 host buffer (stage3.py grad_partitions_flat_buffer, stage_1_and_2.py pinned fp32 grad)",
    "window_gradient_partition": "ZeRO-1/2 without accumulation: the reduced gradient partition (every "
    "gradient at "
    "ZeRO-1), made at the boundary and freed by the optimizer step's zero_grad "
    "(stage_1_and_2.py averaged_gradients); measured absent between steps",
    "gradient_accumulation": "16-bit gradient accumulation partition on the host with optimizer offload and "
    "accumulation > 1 (docs/reference.md section 1: +2 Phi when G > 1)",
    "optimizer_states": "Adam's two fp32 moments of the rank's partition (8 bytes per element)",
    "optimizer_gradients": "ZeRO-3 with optimizer offload: the fp32 gradient the optimizer steps on, one "
    "pinned "
    "host buffer per sub-group held for the run beside the accumulation buffer (stage3.py "
    "initialize_optimizer_states, subgroup_gradient_buffer as fp32_partitioned_groups_flat"
    "[i].grad); measured: the smoke run's ranks hold exactly one such partition-sized fp32 "
    "tensor more than the other terms (docs/measurements.md)",
    "persistent_parameters": "parameters at or below stage3_param_persistence_threshold, kept whole on every "
    "rank "
    "(partition_parameters.py ds_persist)",
    "reduce_bucket": "ZeRO-3's contiguous gradient bucket, torch.empty(reduce_bucket_size) per parameter "
    "dtype at "
    "optimizer init, held for the run (stage3.py ipg_buckets buffer)",
    "gradient_reduction_buckets": "ZeRO-1/2's gradient reduction buckets, torch.empty(reduce_bucket_size) at "
    "the "
    "micro-step's first accumulated gradient, two with overlap_comm "
    "(stage_1_and_2.py process_gradients -> setup_buckets), alive through the "
    "optimizer step (measured)",
    "gradient_reduction_buckets_per_backward": "ZeRO-2's gradient reduction buckets planned for a DeepSpeed "
    "from "
    "0.3.0 to 0.3.16, in place of gradient_reduction_buckets: each holds "
    "4.5 x reduce_bucket_size elements (reduction_bucket_factor), "
    "allocated before each loss backward (stage2.py backward) and "
    "released at its end (independent_gradient_partition_epilogue -> "
    "_release_ipg_buffers), so not in the optimizer step. That "
    "release allocates them only with contiguous_gradients, which its "
    "cpu_offload forces; the ledger does not read contiguous_gradients",
    "reduce_scatter_buffer": "ZeRO-3's reduction of its gradient bucket: the bucket's gradients interleaved "
    "into one "
    "flat buffer, at most reduce_bucket_size elements (runtime/comm/coalesced_collectives.py "
    "reduce_scatter_coalesced, torch.cat); after the backward, or inside it when the model "
    "is larger than one bucket",
    "reduce_scatter_cpu_copy": "on the CPU accelerator a second flat copy while the reduce-scatter runs "
    "(measured on "
    "gloo: its reduce-scatter splits the buffer into new storage); not assumed on GPUs",
    "reduce_scatter_in_backward": "ZeRO-3 with a model larger than one bucket: a bucket fills and is reduced "
    "inside "
    "the backward, its flat buffer (and on the CPU its copy) beside what is left of "
    "the activations",
    "last_gradient": "ZeRO-3: the gradient whose hook starts the final bucket reduction, held until it ends "
    "(measured: "
    "the input embedding's); the largest layer's at most",
    "allreduce_flat_buffer": "ZeRO-0's flattened all-reduce bucket, made at the accumulation boundary after "
    "the "
    "backward (engine.py allreduce_gradients -> buffered_allreduce_fallback: flatten of at "
    "most 5e8 elements, reduced, copied back)",
    "window_gradients": "ZeRO-0 without accumulation: every gradient, from the micro-step's backward until "
    "the "
    "optimizer step's zero_grad frees it (engine.py; held between steps only with accumulation "
    "> 1, as gradients)",
    "unsharded_parameters": "FSDP2: the root gathered whole (from its forward to the end of its backward) "
    "and two "
    "decoder layers (the one running and the one prefetched), in the compute dtype",
    "gathered_parameter_copies": "ZeRO-3: each gathered parameter's own copy out of the coalesced fetch's "
    "flat buffer "
    "(partition_parameters.py: param.data = torch.cat(partitions)), made for every "
    "parameter of the fetch at once when its first is waited, beside the buffer "
    "(measured: 2 x the fetch at the forward's start, 455.1 MB on a 227.6 MB model)",
    "gathered_copy_in_use": "ZeRO-3 at the forward's end: the copy of the module running (the head), at most "
    "the "
    "largest layer's, beside the fetch's buffer, which lives until the fetch's last parameter "
    "is used (measured: freed at the head's matmul)",
    "gathered_parameters": "ZeRO-3's gathered working set, in the forward and again once the backward has "
    "passed "
    "its first accumulated gradient (measured: released at the forward's end, not alive at "
    "the loss's backward): what its fetch trace keeps gathered at once (parameters "
    "used again within stage3_max_reuse_distance stay gathered, "
    "partitioned_param_coordinator.py __params_to_release; zerogate.predict.comms.zero3_trace) "
    "plus the prefetch bucket, which stage3_max_live_parameters caps "
    "(partitioned_param_coordinator.py fetch_sub_module), at most the model",
    "offload_gradient_buffer": "ZeRO-1/2 with optimizer offload: the device buffer of the largest "
    "parameter's size "
    "gradients pass through on their way to the host, held for the run (stage_1_and_2.py "
    "temp_grad_buffer_for_gpu_offload)",
    "offload_gradient_conversion": "ZeRO-1/2 with optimizer offload: as a bucket is reduced, each gradient "
    "slice in "
    "the rank's partition is copied to fp64 on the device for its norm "
    "(stage_1_and_2.py copy_grads_in_partition -> set_norm_for_param_grad_in_gpu: "
    ".to(get_norm_dtype()), fp64 on every accelerator that has it, CPU and CUDA: "
    "zero/utils.py), then, in 16-bit training, to fp32 before its copy to the host "
    "(async_inplace_copy_grad_to_fp32_buffer_from_gpu); one after the other, each "
    "freed before the next: the fp64 copy, 8 bytes per element of at most the largest "
    "parameter's slice; at the accumulation boundary, where the last bucket is reduced "
    "beside the buckets, after the backward",
    "offload_gradient_conversion_in_backward": "the same copies inside the backward, beside what is left of "
    "the "
    "activations, when the model is larger than one bucket (a bucket "
    "that fills is reduced at once: stage_1_and_2.py "
    "reduce_independent_p_g_buckets_and_remove_grads)",
    "offload_overflow_check": "ZeRO-1/2 with optimizer offload, planned for a DeepSpeed before 0.19.6: right "
    "after "
    "a gradient's fp64 norm copy is freed, its overflow check tests the parameter's whole "
    "gradient elementwise (stage_1_and_2.py copy_grads_in_partition -> "
    "update_offload_overflow_tracker_for_param_grad -> _has_inf_or_nan; from 0.13.3 an "
    "fp32 copy, three boolean masks and a second fp32 tensor at once, 11 bytes per element "
    "of the largest parameter in 16-bit, before it the fp32 copy alone: "
    "overflow_check_bytes_per_element); the term is what that needs above the fp64 copy, in "
    "the phases the copy is in. None from 0.19.6 (PR #8325), whose check reduces to two "
    "scalars (runtime/utils.py has_inf_or_nan)",
    "offload_overflow_check_in_backward": "the same check inside the backward, where the copies are",
    "offload_gradient_staging": "ZeRO-1/2 with optimizer offload: the host buffer of the largest parameter's "
    "size "
    "(pinned with pin_memory), held for the run (stage_1_and_2.py "
    "temp_grad_buffer_for_cpu_offload)",
    "offload_parameter_buffer": "ZeRO-1/2 with optimizer offload: a host buffer of the rank's partition in "
    "the "
    "parameters' dtype that the updated master is copied through to the device, held "
    "for the run (stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, "
    "pinned with pin_memory)",
    "largest_layer_gradient": "the largest layer's full gradient before it is reduced into the partitions "
    "(ZeRO-2/3, "
    "FSDP2's unit) where the backward is not traced with its weight gradients",
    "tied_weight_gradient": "with tied input and output embeddings, the output embedding's gradient "
    "contribution, "
    "computed first in the backward and held by autograd until the input embedding's "
    "arrives at the backward's end, when the two are summed into the one gradient the "
    "other gradient terms count (torch/csrc/autograd/input_buffer.h: the InputBuffer "
    "accumulates a gradient used twice; AccumulateGrad, and DeepSpeed's gradient hook on "
    "it, runs once on the sum); where the backward is traced, the trace holds it",
    "activations": "what one micro-step's forward keeps for the backward (zerogate.predict.activations)",
    "backward_transient": "what the backward holds on top of the kept activations at its peak up to its "
    "first "
    "accumulated gradient, weight gradients in flight included (zerogate.predict.trace)",
    "activations_at_first_gradient": "what is alive when the backward's first weight gradient is "
    "accumulated: the "
    "activations not yet released and what the backward holds then "
    "(zerogate.predict.trace); the activations where not traced",
    "backward_transient_after_first_gradient": "the backward's peak after its first accumulated gradient "
    "above "
    "those bytes, each weight gradient dropped once accumulated "
    "(zerogate.predict.trace)",
    "fp32_gradient_copy": "the optimizer step's fp32 copy of the gradients: ZeRO-0 with 16-bit training "
    "flattens "
    "a per-parameter fp32 copy of every gradient into one more (4 Phi + 4 Phi while both "
    "live, runtime/fp16/fused_optimizer.py step); ZeRO-1/2 flatten the partition and convert "
    "it (b + 4 bytes per element of Phi/N, stage_1_and_2.py step); ZeRO-3 the same per "
    "sub-group of sub_group_size elements (stage3.py _prepare_fp32_grad_for_sub_group); "
    "none on the device with optimizer offload (optimizer_gradients, on the host, is the copy)",
    "allocator_margin": "the CUDA caching allocator's reserve above the tensor peak, "
    f"{100 * ALLOCATOR_MARGIN:.1f} % "
    "(assumed from one published DeepSpeed memory line, docs/reference.md section 3)",
    "cuda_context": "CUDA context and cuBLAS workspaces, 0.6 GiB (the upper end of users' 0.3-0.6 GiB, "
    "docs/reference.md section 1)",
    "communicator": "NCCL's device buffers: 1.6 GB published per GPU for one communicator (NVIDIA/nccl issue "
    "864) "
    "less the CUDA context term",
    "host_runtime": "a rank's process before any model: measured on the CPU accelerator "
    "(zerogate.runtime.baseline, 0.55 GB here), assumed 2 GiB with the CUDA libraries",
    "model_build": "the model as each rank builds it on the host before DeepSpeed moves it: whole in fp32 at "
    "ZeRO-0/1/2 (zerogate.model.build loads fp32; DeepSpeed's estimator: 4 Phi per GPU), the "
    "largest layer in fp32 under zero.Init at ZeRO-3 (the estimator's zero_init figure, 4 L)",
    "nvme_swap_buffers": "pinned host buffers of NVMe offload: buffer_count x buffer_size parameter elements "
    "(swap_tensor/partitioned_param_swapper.py) and buffer_count x the largest sub-group of "
    "fp32 optimizer elements (swap_tensor/optimizer_utils.py SwapBufferManager)",
    "runtime_baseline": "the runtime's resident set measured in a process without the run's model "
    "(zerogate.runtime.baseline)",
    "shm_comm_buffer": "the resident page of each other rank's shm comm workspace "
    "(deepspeed/ops/csrc/cpu/comm/shm.cpp)",
    "retained_heap": "on the CPU accelerator, freed tensor memory glibc's heap keeps resident: a storage of "
    "at most "
    "32 MiB comes from the heap, whose freed pages stay for reuse, a larger one is mapped and "
    "unmapped when freed (malloc/malloc.c: the dynamic mmap threshold, DEFAULT_MMAP_THRESHOLD_MAX; "
    "zerogate.runtime.heap), so from the second step on the resident set holds each size class's "
    "own peak over the step's phases, not the peak of their sum: the sum of the two class peaks "
    "less the tensor peak's transient (activations' classes traced, DeepSpeed's buffers by their "
    "storage sizes; no trimming or fragmentation assumed); where the activations are not traced, "
    "not predicted",
}

# The phases of a device's terms (see the module docstring); OVERHEAD is what is not a tensor.
PERSISTENT = (
    "parameters",
    "master_parameters",
    "gradients",
    "gradient_accumulation",
    "optimizer_states",
    "optimizer_gradients",
    "persistent_parameters",
    "reduce_bucket",
    "offload_gradient_buffer",
    "offload_gradient_staging",
    "offload_parameter_buffer",
)
# ZeRO-3's forward starts with its coalesced fetch split into every parameter's copy, and ends with the
# fetch's buffer, the running module's copy and the activations.
FORWARD_START = ("gathered_parameters", "gathered_parameter_copies")
FORWARD = ("gathered_parameters", "gathered_copy_in_use", "unsharded_parameters", "activations")
BACKWARD = (
    "unsharded_parameters",
    "largest_layer_gradient",
    "tied_weight_gradient",
    "activations",
    "backward_transient",
    "gradient_reduction_buckets_per_backward",
)
# ZeRO-0's gradients accumulate in the backward (window_gradients); ZeRO-1/2/3 hand each to their buckets.
BACKWARD_FROM_FIRST_GRADIENT = (
    "gathered_parameters",
    "unsharded_parameters",
    "largest_layer_gradient",
    "tied_weight_gradient",
    "offload_gradient_conversion_in_backward",
    "offload_overflow_check_in_backward",
    "gradient_reduction_buckets",
    "gradient_reduction_buckets_per_backward",
    "window_gradients",
    "reduce_scatter_in_backward",
    "activations_at_first_gradient",
    "backward_transient_after_first_gradient",
)
BOUNDARY = (
    "window_gradients",
    "window_gradient_partition",
    "allreduce_flat_buffer",
    "last_gradient",
    "reduce_scatter_buffer",
    "reduce_scatter_cpu_copy",
    "gradient_reduction_buckets",
    "gradient_reduction_buckets_per_backward",
    "offload_gradient_conversion",
    "offload_overflow_check",
)
OPTIMIZER_STEP = (
    "window_gradients",
    "window_gradient_partition",
    "gradient_reduction_buckets",
    "fp32_gradient_copy",
)
PHASES = {
    "forward_start": FORWARD_START,
    "forward": FORWARD,
    "backward": BACKWARD,
    "backward_from_first_gradient": BACKWARD_FROM_FIRST_GRADIENT,
    "boundary": BOUNDARY,
    "optimizer_step": OPTIMIZER_STEP,
}
# The terms an activation source (traced or the formula) gives: what one micro-step keeps and what its
# backward adds.
ACTIVATION_TERMS = (
    "activations",
    "backward_transient",
    "activations_at_first_gradient",
    "backward_transient_after_first_gradient",
)
OVERHEAD = ("allocator_margin", "cuda_context", "communicator")
# Host RAM terms that are not offloaded model state.
HOST_SETUP = ("host_runtime", "model_build", "nvme_swap_buffers")


def paper_ledger(phi: int, ranks: int) -> dict[str, int | None]:
    """Model-state bytes per GPU as the ZeRO paper (and the claim, claim.md section 2) writes them."""
    return {
        "ddp": 16 * phi,
        "zero1": 4 * phi + 12 * phi // ranks,
        "zero2": 2 * phi + 14 * phi // ranks,
        "zero2_offload_optimizer": None,  # the paper gives no offload formula
        "zero3": 16 * phi // ranks,
        "zero3_offload_optimizer": None,
        # The claim's own "ZeRO-3 + Offload" line (claim.md section 2): 2 Phi / N_d + M_activation.
        "zero3_offload_all": 2 * phi // ranks,
    }


def deepspeed_estimates(
    counts: ModelCounts, gpus_per_node: int, nodes: int = 1
) -> dict[str, dict[str, int] | None]:
    """DeepSpeed's estimators on the same counts: per-GPU ``device`` and per-node ``host`` bytes.

    DeepSpeed has none for DDP or ZeRO-1. ``zero_init=True``: zerogate builds models under zero.Init.
    """
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    def z2(offload: bool) -> dict[str, int]:
        host, device = estimate_zero2_model_states_mem_needs(
            counts.total, gpus_per_node, nodes, cpu_offload=offload
        )
        return {"device": int(device), "host": int(host)}

    def z3(offload_optimizer: bool, offload_param: bool) -> dict[str, int]:
        host, device, _ = estimate_zero3_model_states_mem_needs(
            counts.total,
            counts.largest_layer,
            gpus_per_node,
            nodes,
            cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param,
            zero_init=True,
        )
        return {"device": int(device), "host": int(host)}

    return {
        "ddp": None,
        "zero1": None,
        "zero2": z2(False),
        "zero2_offload_optimizer": z2(True),
        "zero3": z3(False, False),
        "zero3_offload_optimizer": z3(True, False),
        "zero3_offload_all": z3(True, True),
    }


# --- Activations
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActivationFigures:
    """One micro-step's activation terms for a setup, and where they come from."""

    saved_bytes: int  # kept by the forward for the backward
    backward_transient_bytes: (
        int  # held by the backward on top of them at its peak, to its first accumulated gradient
    )
    basis: str  # "traced" | "formula"
    how: str
    per_layer_bytes: int | None = None
    outside_layers_bytes: int | None = None
    layers: int = 0
    # Traced only: alive at the backward's first accumulated gradient, and its peak after it above that.
    at_first_gradient_bytes: int | None = None
    after_first_gradient_bytes: int = 0
    # Traced only: per phase with activations (forward, backward, backward_from_first_gradient), each of the C
    # allocator's size classes' peak of live bytes (zerogate.predict.trace), {"heap": ..., "mapped": ...}.
    size_classes: dict[str, dict[str, int]] | None = None

    @property
    def weight_gradients_traced(self) -> bool:
        """Whether the backward figures hold the weight gradients in flight (and a tied weight's two
        parts)."""
        return self.at_first_gradient_bytes is not None


# What the ledger asks for a setup's activations (zerogate.predict.activations.TracedActivations traces them).
Activations = Callable[[Setup], ActivationFigures]


def activation_bytes(counts: ModelCounts, setup: Setup, checkpointing: bool) -> int:
    """The Korthikanti formula's activations of one micro-batch, logits included: the cross-check column.

    Per decoder layer s*b*h*(34 + 5*a*s/h) bytes in 16-bit (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", eq. 1), scaled by dtype bytes / 2; with full activation
    checkpointing 2*s*b*h per layer (the layer inputs) plus one layer recomputed in full. Logits: s*b*V in
    the training dtype plus the fp32 upcast and its gradient that the loss computes (without the upcast,
    ``setup.loss_in_fp32`` false, the two in the training dtype). Derived for GPT-3-style layers: it knows
    nothing of gated MLPs, another intermediate size, norm upcasts or fused attention.
    """
    s, b, h, a = setup.seq_len, setup.micro_batch, counts.hidden, counts.heads
    scale = setup.dtype_bytes / 2
    per_layer = s * b * h * (34 + 5 * a * s / h) * scale
    layers = (
        (2 * s * b * h * scale * counts.layers + per_layer) if checkpointing else per_layer * counts.layers
    )
    loss_bytes = 4 if setup.loss_in_fp32 else setup.dtype_bytes
    logits = s * b * counts.vocab * (setup.dtype_bytes + 2 * loss_bytes)
    return int(layers + logits)


def formula_activations(counts: ModelCounts) -> Activations:
    """The Korthikanti formula as the activation source (hand-made counts have no architecture to trace)."""

    def figures(setup: Setup) -> ActivationFigures:
        return ActivationFigures(
            activation_bytes(counts, setup, setup.activation_checkpointing),
            0,
            "formula",
            "Korthikanti et al. 2022 eq. 1 (GPT-3-style layers), logits in the dtype and fp32; "
            "no backward transient",
            layers=counts.layers,
        )

    return figures


# --- zerogate's terms
# -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def gathered_elements(counts: ModelCounts, setup: Setup) -> int:
    """Elements ZeRO-3 holds gathered at once: its fetch trace's most (reuse distance), plus the prefetch
    bucket as far as stage3_max_live_parameters lets it prefetch, at most the model."""
    held = zero3_most_gathered(
        counts, setup.ranks, setup.persistence_threshold, setup.max_reuse_distance, setup.leaf_blocks
    )
    prefetch = min(setup.prefetch_bucket, max(0, setup.max_live_parameters - held))
    return min(counts.total, held + prefetch)


def fp32_gradient_copy_bytes(counts: ModelCounts, setup: Setup, share: int) -> int:
    """The optimizer step's fp32 gradient copy on the device (TERM_SOURCES['fp32_gradient_copy'])."""
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


def reduce_scatter_terms(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """ZeRO-3's bucket reduction (TERM_SOURCES: reduce_scatter_buffer, reduce_scatter_cpu_copy, last_gradient,
    reduce_scatter_in_backward), bytes."""
    b = setup.dtype_bytes
    flat = b * min(counts.total, setup.reduce_bucket)
    terms = {"reduce_scatter_buffer": flat, "last_gradient": b * counts.largest_layer}
    if setup.device_kind == "cpu":
        terms["reduce_scatter_cpu_copy"] = flat
    if counts.total > setup.reduce_bucket:
        terms["reduce_scatter_in_backward"] = flat + terms.get("reduce_scatter_cpu_copy", 0)
    return terms


def host_runtime_bytes(setup: Setup) -> int:
    """A rank's process before any model (HOST_RUNTIME_BYTES, the ``host_runtime`` term)."""
    return HOST_RUNTIME_BYTES["cpu" if setup.device_kind == "cpu" else "cuda"]


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


def reduction_bucket_factor(deepspeed: tuple[int, ...]) -> float:
    """How many times reduce_bucket_size elements each of ZeRO-2's gradient reduction buckets holds in that
    DeepSpeed release: 4.5 from 0.3.0 (the ZeRO-Offload release, PR #391) to 0.3.16, whose stage2.py backward
    allocates torch.empty(int(self.reduce_bucket_size * 4.5)) per bucket ("TODO: we need to revist this and
    remove the magic 4.5x multiplier here"); 1 before (0.2.0's deepspeed_zero_optimizer.py) and from 0.4.0
    (PR #1042, "ZeRO stage 1 refresh")."""
    return 4.5 if (0, 3, 0) <= deepspeed < (0, 4, 0) else 1.0


def zerogate_terms(
    counts: ModelCounts, setup: Setup, activations: Activations | None = None
) -> dict[str, Any]:
    """zerogate's prediction for ``setup``, bytes: per-rank ``device`` terms (tensors and OVERHEAD),
    per-rank ``host`` terms (offloaded state, HOST_SETUP), per-rank ``nvme`` terms, and the ``pinned`` share
    of the host terms. ``activations``: the activation source (default: the Korthikanti formula)."""
    n, b, phi = setup.ranks, setup.dtype_bytes, counts.total
    figures = (activations or formula_activations(counts))(setup)
    # One rank's share. ZeRO-3 pads every parameter to a multiple of the ranks; ZeRO-1/2 pad the flat group.
    share = counts.partition_numel(n) if setup.stage == 3 else math.ceil(phi / n)
    # ZeRO-1/2/3 always keep a separate fp32 master partition (TERM_SOURCES); ZeRO-0 only for 16-bit training.
    master = 0 if (b == 4 and setup.stage == 0) else 4
    device: dict[str, int] = {}
    host: dict[str, int] = {}
    nvme: dict[str, int] = {}

    params_full = phi if setup.stage < 3 else share
    if setup.offload_param:
        (nvme if setup.nvme_param else host)["parameters"] = b * share
    else:
        device["parameters"] = b * params_full
    grads_share = phi if setup.stage < 2 else share
    optimizer_state = {
        "master_parameters": master * share if setup.stage >= 1 else master * phi,
        "optimizer_states": 8 * (share if setup.stage >= 1 else phi),
    }
    if setup.offload_optimizer:
        # Gradient partitions go to a flat fp32 host buffer (stage3 grad_partitions_flat_buffer).
        host["gradients"] = 4 * share
        (nvme if setup.nvme_optimizer else host).update(optimizer_state)
        if setup.stage == 3 and not setup.nvme_optimizer:
            host["optimizer_gradients"] = 4 * share
        if setup.accumulation > 1 and b < 4:
            host["gradient_accumulation"] = b * share
        if setup.stage in (1, 2):
            device["offload_gradient_buffer"] = b * counts.largest_layer
            host["offload_gradient_staging"] = b * counts.largest_layer
            host["offload_parameter_buffer"] = b * share
            # The fp64 norm copy and the fp32 conversion come one after the other: the larger, 8 bytes per
            # element.
            device["offload_gradient_conversion"] = FP64_BYTES * min(counts.largest_layer, share)
            # Right after the fp64 copy, the overflow check tests the parameter's whole gradient: what it
            # needs above that copy (none in the installed release).
            check = overflow_check_bytes_per_element(planned_deepspeed(setup), b) * counts.largest_layer
            if check > device["offload_gradient_conversion"]:
                device["offload_overflow_check"] = check - device["offload_gradient_conversion"]
            if phi > setup.reduce_bucket:
                device["offload_gradient_conversion_in_backward"] = device["offload_gradient_conversion"]
                if "offload_overflow_check" in device:
                    device["offload_overflow_check_in_backward"] = device["offload_overflow_check"]
    else:
        # Without accumulation ZeRO-0's gradients live from the backward, ZeRO-1/2's reduced partitions from
        # the boundary, to the optimizer step's end; ZeRO-3 accumulates into a buffer held for the run.
        window = {0: "window_gradients", 1: "window_gradient_partition", 2: "window_gradient_partition"}
        name = window[setup.stage] if setup.accumulation == 1 and setup.stage < 3 else "gradients"
        device[name] = b * grads_share
        device.update(optimizer_state)

    if setup.stage == 3:
        device["persistent_parameters"] = b * counts.persistent_numel(setup.persistence_threshold)
        device["gathered_parameters"] = b * gathered_elements(counts, setup)
        device["gathered_parameter_copies"] = device["gathered_parameters"]
        device["gathered_copy_in_use"] = b * counts.largest_layer
        device["reduce_bucket"] = b * setup.reduce_bucket
        device.update(reduce_scatter_terms(counts, setup))
    elif setup.stage >= 1:
        buckets = 2 if setup.overlap_comm else 1
        # Before 0.4.0 ZeRO-1 was another optimizer (zero/stage1.py); the factor is stage2.py's.
        factor = reduction_bucket_factor(planned_deepspeed(setup)) if setup.stage == 2 else 1.0
        if factor == 1.0:
            device["gradient_reduction_buckets"] = buckets * b * setup.reduce_bucket
        else:
            device["gradient_reduction_buckets_per_backward"] = (
                buckets * b * int(factor * setup.reduce_bucket)
            )
    else:
        device["allreduce_flat_buffer"] = b * min(phi, ZERO0_ALLREDUCE_ELEMENTS)
    # Where the backward is traced with its weight gradients in flight, the trace holds the largest layer's
    # and a tied weight's parts; otherwise they are terms of their own.
    if setup.stage >= 2 and not figures.weight_gradients_traced:
        device["largest_layer_gradient"] = b * counts.largest_layer
    if counts.tied_embeddings and not figures.weight_gradients_traced:
        device["tied_weight_gradient"] = b * counts.vocab * counts.hidden
    device["fp32_gradient_copy"] = fp32_gradient_copy_bytes(counts, setup, share)
    device["activations"] = figures.saved_bytes
    device["backward_transient"] = figures.backward_transient_bytes
    device["activations_at_first_gradient"] = (
        figures.saved_bytes if figures.at_first_gradient_bytes is None else figures.at_first_gradient_bytes
    )
    device["backward_transient_after_first_gradient"] = figures.after_first_gradient_bytes
    if setup.device_kind == "cuda":
        device["allocator_margin"] = int(ALLOCATOR_MARGIN * device_levels(device)["tensor"])
        device["cuda_context"] = CUDA_CONTEXT_BYTES
        if setup.ranks > 1:
            device["communicator"] = COMMUNICATOR_BYTES

    pinned = {}
    if setup.pin_memory:
        pinned = {
            k: v
            for k, v in host.items()
            if k
            in (
                "parameters",
                "gradients",
                "gradient_accumulation",
                "optimizer_gradients",
                "offload_gradient_staging",
                "offload_parameter_buffer",
            )
        }
    swap = 0
    if setup.nvme_param:
        swap += setup.param_swap_buffer_count * setup.param_swap_buffer_size * b
    if setup.nvme_optimizer:
        swap += setup.optimizer_swap_buffer_count * min(share, setup.sub_group_size) * 4
    if swap:
        host["nvme_swap_buffers"] = swap
        pinned["nvme_swap_buffers"] = swap
    host["host_runtime"] = host_runtime_bytes(setup)
    host["model_build"] = 4 * (counts.largest_layer if setup.stage == 3 else phi)
    return {"device": device, "host": host, "nvme": nvme, "pinned": pinned, "activations": figures}


def transient_bytes(terms: dict[str, int]) -> int:
    """What a step adds above the persistent terms at its peak, bytes: the largest of its phases (PHASES)."""
    return max(phase_bytes(terms).values())


def phase_bytes(terms: dict[str, int]) -> dict[str, int]:
    """What each phase (PHASES) adds above the persistent terms, bytes."""
    return {name: sum(v for k, v in terms.items() if k in names) for name, names in PHASES.items()}


def device_levels(device: dict[str, int]) -> dict[str, int]:
    """A device's peak at three levels, bytes: ``tensor`` (what torch.cuda.max_memory_allocated counts: the
    persistent terms plus the larger of the micro-step's and the optimizer step's), ``allocator`` (plus the
    caching allocator's margin: max_memory_reserved) and ``device`` (plus the CUDA context and the
    communicator: what NVML sees, and what must fit the device)."""
    persistent = sum(v for k, v in device.items() if k in PERSISTENT)
    tensor = persistent + transient_bytes(device)
    allocator = tensor + device.get("allocator_margin", 0)
    return {
        "tensor": tensor,
        "allocator": allocator,
        "device": allocator + device.get("cuda_context", 0) + device.get("communicator", 0),
    }


def host_need_per_rank(terms: dict[str, Any], on_cpu: bool) -> int:
    """Host RAM one rank needs: its runtime, plus the larger of the model as built at initialisation and
    what it holds in training (offloaded state and swap buffers; on the CPU accelerator every tensor)."""
    host = terms["host"]
    held = sum(v for k, v in host.items() if k not in ("host_runtime", "model_build"))
    if on_cpu:
        held += device_levels(terms["device"])["tensor"]
    return host["host_runtime"] + max(host["model_build"], held)


def model_state_bytes(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """The four tensors each rank holds for the whole run, as zerogate.train.held.held_bytes measures them."""
    terms = zerogate_terms(counts, setup, lambda s: ActivationFigures(0, 0, "none", "not needed"))
    merged = {**terms["device"], **terms["host"], **terms["nvme"]}
    return {
        "parameters(bytes)": merged.get("parameters", 0),
        "master_parameters(bytes)": merged.get("master_parameters", 0),
        "gradients(bytes)": merged.get("gradients", 0),
        "optimizer_states(bytes)": merged.get("optimizer_states", 0),
    }


def ledger(counts: ModelCounts, setup: Setup, activations: Activations | None = None) -> dict[str, Any]:
    """Every scheme, three ledgers, per rank and per host. ``setup.scheme`` is the run's own scheme."""
    activations = activations or formula_activations(counts)
    ranks_per_node = setup.ranks_per_node
    paper = paper_ledger(counts.total, setup.ranks)
    estimates = deepspeed_estimates(counts, ranks_per_node, setup.nodes)
    schemes: dict[str, Any] = {}
    for scheme in SCHEMES:
        variant = setup.with_scheme(scheme)
        terms = zerogate_terms(counts, variant, activations)
        other = dataclasses.replace(variant, activation_checkpointing=not variant.activation_checkpointing)
        levels = device_levels(terms["device"])
        other_levels = device_levels(zerogate_terms(counts, other, activations)["device"])
        on_cpu = setup.device_kind == "cpu"
        schemes[scheme] = {
            "paper": {"device_per_rank(bytes)": paper[scheme]},
            "deepspeed": None
            if estimates[scheme] is None
            else {
                "device_per_rank(bytes)": estimates[scheme]["device"],
                "host_per_node(bytes)": estimates[scheme]["host"],
            },
            "zerogate": {
                "device_terms(bytes)": terms["device"],
                "host_terms_per_rank(bytes)": terms["host"],
                "nvme_terms_per_rank(bytes)": terms["nvme"],
                "device_tensor_peak_per_rank(bytes)": levels["tensor"],
                "device_allocator_peak_per_rank(bytes)": levels["allocator"],
                "device_per_rank(bytes)": levels["device"],
                "device_per_rank_other_checkpointing(bytes)": other_levels["device"],
                "activations_formula(bytes)": activation_bytes(
                    counts, variant, variant.activation_checkpointing
                ),
                "host_per_node(bytes)": host_need_per_rank(terms, on_cpu) * ranks_per_node,
                "nvme_per_node(bytes)": sum(terms["nvme"].values()) * ranks_per_node,
                "pinned_per_node(bytes)": sum(terms["pinned"].values()) * ranks_per_node,
            },
        }
    own = activations(setup)
    return {
        "parameters": counts.total,
        "largest_layer_parameters": counts.largest_layer,
        "ranks": setup.ranks,
        "nodes": setup.nodes,
        "dtype": setup.dtype,
        "activation_checkpointing": setup.activation_checkpointing,
        "attention": setup.attention,
        "micro_batch": setup.micro_batch,
        "seq_len": setup.seq_len,
        "scheme": setup.scheme,
        "activations": {
            "basis": own.basis,
            "how": own.how,
            "per_layer(bytes)": own.per_layer_bytes,
            "outside_layers(bytes)": own.outside_layers_bytes,
            "layers": own.layers,
            "saved(bytes)": own.saved_bytes,
            "backward_transient(bytes)": own.backward_transient_bytes,
            "at_first_gradient(bytes)": own.at_first_gradient_bytes,
            "after_first_gradient(bytes)": own.after_first_gradient_bytes,
            "size_classes(bytes)": own.size_classes,
            "formula(bytes)": activation_bytes(counts, setup, setup.activation_checkpointing),
        },
        "term_sources": TERM_SOURCES,
        "schemes": schemes,
    }


# --- The rank's peak, level by level
# --------------------------------------------------------------------------

# DeepSpeed's shared-memory all-reduce workspace on the CPU accelerator (deepspeed/ops/csrc/cpu/comm/shm.cpp,
# struct allreduce_workspace: 2 * NAIVE_ALLREDUCE_THRESHOLD + 2 * MAX_BUF_SIZE bytes, 1 MiB and 32 MiB), one
# /dev/shm file per rank, mapped by every rank (zerogate.runtime.launch.shm_buffers): 66 MiB (69.2 MB). A page
# of it is resident only once written, and training's collectives go through gloo, not this op (it serves
# inference_all_reduce): each rank writes the state words of its own workspace and reads the others'. So
# the resident share is one page per rank (RssShmem of a cpu-smollm2 rank: 8 kB), the rest is address space.
SHM_WORKSPACE_BYTES = 2 * 1048576 + 2 * 1048576 * 32
PAGE_BYTES = 4096
# Which resident-set terms stay for the whole run (what the rank holds between steps) and which come and go
# inside a step (the per-window peak above the window's end): the split the measured per-window peaks
# (memory/peak_rss and memory/rss at the end of each step) can check term by term.
PERSISTENT_TERMS = ("runtime_baseline", "shm_comm_buffer", "retained_heap", *PERSISTENT)
TRANSIENT_TERMS = tuple(dict.fromkeys(name for names in PHASES.values() for name in names))
# The peaks each accelerator measures, what predicts each and the step-record column (or file) it is set
# against.
PEAK_LEVELS = {
    "cuda": (
        ("tensor", "torch.cuda.max_memory_allocated: the tensors' peak"),
        ("allocator", "torch.cuda.max_memory_reserved: the caching allocator's peak"),
        ("device", "NVML's process memory: the device's peak (allocator, CUDA context, communicator)"),
    ),
    "cpu": (
        ("tensor", "live tensor bytes of one sampled optimizer step outside the timed ones"),
        ("resident_set", "resident-set peak of the rank's process (VmHWM)"),
    ),
}
# The level a peak prediction heads with (PeakPrediction.total_bytes), per accelerator.
HEADLINE_LEVEL = {"cpu": "resident_set", "cuda": "allocator"}


def cpu_tensor_terms(
    counts: ModelCounts, setup: Setup, activations: Activations | None = None
) -> dict[str, int]:
    """On the CPU accelerator every tensor term is host memory: the device and host tensor terms of
    :func:`zerogate_terms` in one mapping (what the live-tensor count sees), without HOST_SETUP."""
    terms = zerogate_terms(counts, setup, activations)
    merged = {k: v for k, v in {**terms["host"], **terms["device"]}.items() if k not in HOST_SETUP}
    return {k: v for k, v in merged.items() if k not in OVERHEAD}


def peak_terms(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> dict[str, int]:
    """Each rank's resident-set (CPU) or device (GPU) terms of its predicted peak, bytes.

    On GPUs the device terms of :func:`zerogate_terms`. On the CPU accelerator the rank's resident-set
    peak: the runtime's own baseline (``runtime_baseline``: a process with the training ranks' imports and
    comm backend and no model of the run's, zerogate.runtime.baseline), every tensor term, and the resident
    share of the shm comm workspace. Buffers allocated at full size but written only in part count as
    resident only for what is written (an untouched page of a CPU tensor is not resident): the reduce
    bucket holds at most the model's gradients, so it counts at most the model (the live-tensor peak,
    :func:`peak_levels`, counts all of it). Where the activations are traced, the freed tensor memory glibc's
    heap keeps resident (``retained_heap``, :func:`retained_heap_bytes`) is a term too."""
    if setup.device_kind != "cpu":
        return dict(zerogate_terms(counts, setup, activations)["device"])
    peak = {
        "runtime_baseline": int(runtime_baseline or 0),
        # The baseline process (a one-rank world) already holds its own workspace's state page.
        "shm_comm_buffer": min(SHM_WORKSPACE_BYTES, PAGE_BYTES * (setup.ranks - 1)),
    }
    peak.update(cpu_tensor_terms(counts, setup, activations))
    if "reduce_bucket" in peak:
        peak["reduce_bucket"] = setup.dtype_bytes * min(counts.total, setup.reduce_bucket)
    if "gradient_reduction_buckets" in peak:
        peak["gradient_reduction_buckets"] = min(
            peak["gradient_reduction_buckets"], setup.dtype_bytes * counts.total
        )
    figures = activations(setup) if activations is not None else None
    retained = retained_heap_bytes(peak, counts, setup, figures.size_classes if figures else None)
    if retained is not None:
        peak["retained_heap"] = retained
    return peak


# Terms made of one storage per parameter (each parameter's gathered copy, each parameter's gradient): a
# storage's size class is its parameter's. Every other term is one storage (a flat buffer, one parameter's
# gradient or copy, a bucket) and has the size class of its bytes.
PER_PARAMETER_TERMS = ("gathered_parameter_copies", "window_gradients")


def heap_bytes_of_term(name: str, nbytes: int, counts: ModelCounts, setup: Setup) -> int:
    """The bytes of term ``name`` (``nbytes`` in all) in storages of glibc's heap size class
    (zerogate.runtime.live_tensors.size_class_of, the class the live-tensor count gives them); the rest of it
    is mapped."""
    from zerogate.runtime.heap import size_class_of

    if name in PER_PARAMETER_TERMS:
        small = sum(n for n in counts.numels if size_class_of(n * setup.dtype_bytes) == "heap")
        return nbytes * small // max(1, sum(counts.numels))
    return nbytes if size_class_of(nbytes) == "heap" else 0


def retained_heap_bytes(
    terms: dict[str, int], counts: ModelCounts, setup: Setup, size_classes: dict[str, dict[str, int]] | None
) -> int | None:
    """Freed tensor bytes glibc's heap keeps resident at the step's peak (TERM_SOURCES["retained_heap"]): the
    heap class's peak over the phases plus the mapped class's, less the tensor peak's transient. The
    activations' classes per phase are the trace's (``size_classes``); None where they are not traced."""
    if size_classes is None:
        return None
    peaks = {"heap": 0, "mapped": 0}
    for phase, names in PHASES.items():
        phase_classes = {"heap": 0, "mapped": 0}
        for name in names:
            if name in terms and name not in ACTIVATION_TERMS:
                heap = heap_bytes_of_term(name, terms[name], counts, setup)
                phase_classes["heap"] += heap
                phase_classes["mapped"] += terms[name] - heap
        if any(name in terms for name in names if name in ACTIVATION_TERMS):
            for size_class in phase_classes:
                phase_classes[size_class] += size_classes[phase][size_class]
        for size_class in peaks:
            peaks[size_class] = max(peaks[size_class], phase_classes[size_class])
    return max(0, peaks["heap"] + peaks["mapped"] - transient_bytes(terms))


def peak_split(terms: dict[str, int]) -> dict[str, int]:
    """The predicted peak as persistent (held between steps) + transient (inside a step), bytes: the
    transient part is the larger of the micro-step's terms and the optimizer step's."""
    persistent = sum(v for k, v in terms.items() if k not in TRANSIENT_TERMS and k not in OVERHEAD)
    overhead = sum(v for k, v in terms.items() if k in OVERHEAD)
    transient = transient_bytes(terms)
    return {
        "persistent(bytes)": persistent + overhead,
        "transient(bytes)": transient,
        "total(bytes)": persistent + overhead + transient,
    }


def peak_levels(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> dict[str, dict[str, Any]]:
    """Each peak the accelerator measures (PEAK_LEVELS), predicted: bytes and the terms it sums."""
    if setup.device_kind != "cpu":
        device = zerogate_terms(counts, setup, activations)["device"]
        levels = device_levels(device)
        tensors = {k: v for k, v in device.items() if k not in OVERHEAD}
        named = {
            "tensor": tensors,
            "allocator": {**tensors, "allocator_margin": device.get("allocator_margin", 0)},
            "device": device,
        }
        return {
            level: {"predicted(bytes)": levels[level], "terms(bytes)": named[level], "what": what}
            for level, what in PEAK_LEVELS["cuda"]
        }
    tensors = cpu_tensor_terms(counts, setup, activations)
    resident = peak_terms(counts, setup, runtime_baseline, activations)
    return {
        "tensor": {
            "predicted(bytes)": peak_split(tensors)["total(bytes)"],
            "terms(bytes)": tensors,
            "what": PEAK_LEVELS["cpu"][0][1],
        },
        "resident_set": {
            "predicted(bytes)": peak_split(resident)["total(bytes)"],
            "terms(bytes)": resident,
            "what": PEAK_LEVELS["cpu"][1][1],
        },
    }


# --- FSDP2, ZeRO's peer (zerogate.runtime.engines.Fsdp2Engine) ---------------------------------------------


def fsdp2_terms(counts: ModelCounts, setup: Setup, activations: Activations | None = None) -> dict[str, int]:
    """Each rank's tensor terms under torch FSDP2 as the Fsdp2Engine wraps the model, bytes: fully_shard on
    every decoder layer (resharded after its forward and backward) and on the root (the embeddings, the final
    norm and the head: the root's parameters stay gathered from its forward to the end of its backward).

    Sharded and held for the run: the parameters (fp32: under bf16 compute the sharded fp32 parameters are
    the master, cast on gathering), the gradients (reduced in fp32 and accumulated sharded) and Adam's two
    states, one rank's share each (each parameter padded along its first dimension,
    ModelCounts.first_dim_padded_numel). Inside a micro-step: the root gathered whole plus
    two decoder layers (the one running and the one prefetched), in the compute dtype; one unit's unsharded
    gradients before its reduce-scatter (the larger of a layer and the root); the activations and the
    backward's transient, as for every scheme of the same model. With CPUOffloadPolicy (``offload_param``)
    the held terms are host memory: on GPUs they leave the device; on the CPU accelerator every term is the
    host's anyway. No separate master copy, no persistent small parameters and no reduce bucket (FSDP2
    keeps none of them)."""
    share = counts.first_dim_shard_numel(setup.ranks)
    compute = setup.dtype_bytes
    root = counts.root_numel()
    layer = max((sum(counts.numels[i] for i in unit) for unit in counts.decoder_layers()), default=0)
    figures = (activations or formula_activations(counts))(setup)
    held = {"parameters": 4 * share, "gradients": 4 * share, "optimizer_states": 8 * share}
    terms = {} if setup.offload_param and setup.device_kind != "cpu" else dict(held)
    terms.update(
        {
            "unsharded_parameters": compute * (root + 2 * layer),
            "largest_layer_gradient": compute * max(root, layer),
            "activations": figures.saved_bytes,
            "backward_transient": figures.backward_transient_bytes,
        }
    )
    if setup.device_kind == "cuda":
        terms["allocator_margin"] = int(ALLOCATOR_MARGIN * device_levels(terms)["tensor"])
        terms["cuda_context"] = CUDA_CONTEXT_BYTES
        if setup.ranks > 1:
            terms["communicator"] = COMMUNICATOR_BYTES
    return terms


def fsdp2_host_need_per_rank(counts: ModelCounts, setup: Setup, terms: dict[str, int]) -> int:
    """Host RAM one FSDP2 rank needs (``terms``: its fsdp2_terms): its runtime, plus the larger of the model
    as the Fsdp2Engine builds it (whole, in fp32, on every rank, before fully_shard shards it) and what it
    holds on the host in training (with CPUOffloadPolicy on GPUs the sharded parameters, gradients and Adam's
    states, 16 bytes per parameter's share; on the CPU accelerator every tensor)."""
    if setup.device_kind == "cpu":
        held = device_levels(terms)["tensor"]
    else:
        held = 16 * counts.first_dim_shard_numel(setup.ranks) if setup.offload_param else 0
    return host_runtime_bytes(setup) + max(4 * counts.total, held)


def fsdp2_peak_levels(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """(the peak's terms, each level the accelerator measures) under FSDP2, as peak_terms and peak_levels
    give them for DeepSpeed: on the CPU accelerator the runtime baseline and the shm workspace's resident
    share on top of the tensor terms (the rank starts DeepSpeed's comm backend like every other)."""
    tensors = fsdp2_terms(counts, setup, activations)
    if setup.device_kind != "cpu":
        levels = device_levels(tensors)
        plain_tensors = {k: v for k, v in tensors.items() if k not in OVERHEAD}
        named = {
            "tensor": plain_tensors,
            "allocator": {**plain_tensors, "allocator_margin": tensors["allocator_margin"]},
            "device": tensors,
        }
        return tensors, {
            level: {"predicted(bytes)": levels[level], "terms(bytes)": named[level], "what": what}
            for level, what in PEAK_LEVELS["cuda"]
        }
    resident = {
        "runtime_baseline": int(runtime_baseline or 0),
        "shm_comm_buffer": min(SHM_WORKSPACE_BYTES, PAGE_BYTES * (setup.ranks - 1)),
        **tensors,
    }
    return resident, {
        "tensor": {
            "predicted(bytes)": peak_split(tensors)["total(bytes)"],
            "terms(bytes)": tensors,
            "what": PEAK_LEVELS["cpu"][0][1],
        },
        "resident_set": {
            "predicted(bytes)": peak_split(resident)["total(bytes)"],
            "terms(bytes)": resident,
            "what": PEAK_LEVELS["cpu"][1][1],
        },
    }
