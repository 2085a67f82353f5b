"""The phases of a step's memory and a device's levels: which terms coexist, and what a device holds at its
peak.

A device's terms fall into phases that do not coexist (:data:`PHASES`): what is held for the whole run
(``PERSISTENT``), then, one after the other, the forward's start (ZeRO-3's coalesced fetch and every
parameter's copy out of it), the forward's end (the fetch, the copies kept for the backward and the
activations), the backward up to its first accumulated gradient (those copies, the activations and the
backward's transient), the backward from then on (ZeRO-1/2's reduction buckets, allocated at that first
gradient, beside what is left of the activations), the reduction at the accumulation boundary after the
backward and the optimizer step. A term may sit in several phases (the activations in the forward and the
backward). The gradients of a window of one micro-step (ZeRO-0's, and ZeRO-1/2's reduced partitions) exist
only from the backward or the boundary to the step's end. The tensor peak is the persistent terms plus the
largest phase (:func:`transient_bytes`). On GPUs what is not a tensor comes on top (:data:`OVERHEAD`: the
caching allocator's fragmentation and ZeRO-3's cross-stream reserve, the CUDA context, the communicators'
buffers; zerogate.predict.cuda_terms).
"""

from __future__ import annotations

from dataclasses import dataclass

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
# fetch's buffer, the copies the fetch trace keeps for the backward and the activations; the backward holds
# those copies at its start, and from its first accumulated gradient the fetches it makes itself.
FORWARD_START = ("gathered_parameters", "gathered_parameter_copies", "offloaded_partition_copies")
FORWARD = (
    "gathered_parameters",
    "offloaded_partition_copies",
    "gathered_parameter_copies",
    "unsharded_parameters",
    "activations",
    "loss_shifted_logits",
)
BACKWARD = (
    "gathered_parameter_copies",
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
    "offloaded_partition_copies",
    "unsharded_parameters",
    "largest_layer_gradient",
    "tied_weight_gradient",
    "offload_gradient_conversion_in_backward",
    "offload_overflow_check_in_backward",
    "offload_gradient_device_copies_in_backward",
    "zero3_offload_gradient_norm_in_backward",
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
    "offload_gradient_device_copies",
    "zero3_offload_gradient_norm",
)
OPTIMIZER_STEP = (
    "window_gradients",
    "window_gradient_partition",
    "gradient_reduction_buckets",
    "fp32_gradient_copy",
    "optimizer_step_temporaries",
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
# What is not a tensor: on GPUs, above the tensor peak.
OVERHEAD = ("allocator_margin", "cross_stream_reserve", "cuda_context", "communicator")
# The part of OVERHEAD that the caching allocator reserves (max_memory_reserved counts it).
ALLOCATOR_OVERHEAD = ("allocator_margin", "cross_stream_reserve")


def phase_bytes(terms: dict[str, int]) -> dict[str, int]:
    """What each phase (PHASES) adds above the persistent terms, bytes."""
    return {name: sum(v for k, v in terms.items() if k in names) for name, names in PHASES.items()}


def transient_bytes(terms: dict[str, int]) -> int:
    """What a step adds above the persistent terms at its peak, bytes: the largest of its phases (PHASES)."""
    return max(phase_bytes(terms).values())


@dataclass(frozen=True)
class DeviceLevels:
    """A device's peak at three levels, bytes (:func:`device_levels`)."""

    tensor: int  # what torch.cuda.max_memory_allocated counts
    allocator: int  # plus what the caching allocator reserves beyond them: max_memory_reserved
    device: int  # plus the CUDA context and the communicator: what NVML sees, and what must fit the device


def device_levels(device: dict[str, int]) -> DeviceLevels:
    """A device's peak at three levels, bytes: ``tensor`` (what torch.cuda.max_memory_allocated counts: the
    persistent terms plus the larger of the micro-step's and the optimizer step's), ``allocator`` (plus the
    caching allocator's margin: max_memory_reserved) and ``device`` (plus the CUDA context and the
    communicator: what NVML sees, and what must fit the device)."""
    persistent = sum(v for k, v in device.items() if k in PERSISTENT)
    tensor = persistent + transient_bytes(device)
    allocator = tensor + sum(device.get(name, 0) for name in ALLOCATOR_OVERHEAD)
    return DeviceLevels(
        tensor=tensor,
        allocator=allocator,
        device=allocator + device.get("cuda_context", 0) + device.get("communicator", 0),
    )
