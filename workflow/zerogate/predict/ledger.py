"""The memory ledger: what each rank and each host needs, three ways, for every ZeRO scheme.

(a) ``paper``: the ZeRO paper's model-state formulas, as the claim quotes them, and (b) ``deepspeed``:
    DeepSpeed's own estimators, called (never re-typed) on the same counts (zerogate.predict.estimates).
(c) ``zerogate``: every tensor DeepSpeed 0.19 allocates for the run (zerogate.predict.zero_terms), each term
    named with where it comes from (:data:`TERM_SOURCES`, gathered from the modules that compute the terms:
    a DeepSpeed source file, a measurement, or a stated assumption): model states (per-parameter partition
    padding included), the fp32 gradient copies of the optimizer step, gathered parameters (reuse distance,
    live-parameter limit, prefetch bucket), the gradient buckets, the activations and backward transients of
    one micro-step (traced from the architecture, zerogate.predict.activations; the Korthikanti formula is
    kept beside it as a cross-check), then what is not a tensor: the CUDA caching allocator's margin, the
    CUDA context and the communicator's buffers. Host RAM per node (the runtime, the model as built at
    initialisation, offloaded state, pinned buffers) and NVMe (offload device nvme) are tiers of their own.

A device's terms fall into phases that do not coexist (zerogate.predict.phases); the device's levels
(tensor, allocator, device) are their peak with and without what is not a tensor.

Parameter counts come from the model's config instantiated on the meta device: no weights, so a 14B model
is counted in seconds. Every figure is in bytes (printed by zerogate.units.format_bytes, GiB and GB side by
side).
"""

from __future__ import annotations

import dataclasses

from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import (
    ActivationTerms,
    EstimatorRow,
    Ledger,
    PaperRow,
    SchemeLedger,
    ZerogateRow,
)
from zerogate.predict.activation_figures import (
    ACTIVATION_SOURCES,
    ActivationFigures,
    Activations,
    activation_bytes,
    formula_activations,
)
from zerogate.predict.cuda_terms import OVERHEAD_SOURCES
from zerogate.predict.estimates import Estimate, deepspeed_estimates, paper_ledger
from zerogate.predict.fit import device_need, host_need
from zerogate.predict.fsdp2_terms import FSDP2_SOURCES
from zerogate.predict.host_memory import HOST_RUNTIME_SOURCES, RESIDENT_SOURCES
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import SCHEMES, Setup
from zerogate.predict.zero_buffers import BUFFER_SOURCES
from zerogate.predict.zero_states import OFFLOAD_SOURCES, STATE_SOURCES
from zerogate.predict.zero_terms import host_need_per_rank, zerogate_terms

# The order the plan lists the terms' sources in (Ledger.term_sources): ZeRO's model states and their
# reduction buffers, FSDP2's gathered units, ZeRO-3's gathered parameters, the offload's buffers, the
# backward's gradients, the activations, the optimizer step's copy, what is not a tensor, then the host.
TERM_ORDER = (
    "parameters",
    "master_parameters",
    "gradients",
    "window_gradient_partition",
    "gradient_accumulation",
    "optimizer_states",
    "optimizer_gradients",
    "persistent_parameters",
    "reduce_bucket",
    "gradient_reduction_buckets",
    "gradient_reduction_buckets_per_backward",
    "reduce_scatter_buffer",
    "reduce_scatter_cpu_copy",
    "reduce_scatter_in_backward",
    "last_gradient",
    "allreduce_flat_buffer",
    "window_gradients",
    "unsharded_parameters",
    "gathered_parameter_copies",
    "gathered_parameters",
    "offloaded_partition_copies",
    "offload_gradient_buffer",
    "offload_gradient_conversion",
    "offload_gradient_conversion_in_backward",
    "offload_overflow_check",
    "offload_overflow_check_in_backward",
    "offload_gradient_device_copies",
    "offload_gradient_device_copies_in_backward",
    "zero3_offload_gradient_norm",
    "zero3_offload_gradient_norm_in_backward",
    "offload_gradient_staging",
    "offload_parameter_buffer",
    "largest_layer_gradient",
    "tied_weight_gradient",
    "activations",
    "loss_shifted_logits",
    "backward_transient",
    "activations_at_first_gradient",
    "backward_transient_after_first_gradient",
    "fp32_gradient_copy",
    "optimizer_step_temporaries",
    "allocator_margin",
    "cross_stream_reserve",
    "cuda_context",
    "communicator",
    "host_runtime",
    "model_build",
    "nvme_swap_buffers",
    "runtime_baseline",
    "shm_comm_buffer",
    "retained_heap",
)
# Where each term comes from, as each term's module states it.
SOURCES_BY_MODULE = (
    STATE_SOURCES,
    OFFLOAD_SOURCES,
    BUFFER_SOURCES,
    FSDP2_SOURCES,
    ACTIVATION_SOURCES,
    OVERHEAD_SOURCES,
    HOST_RUNTIME_SOURCES,
    RESIDENT_SOURCES,
)
_EVERY_SOURCE = {name: text for sources in SOURCES_BY_MODULE for name, text in sources.items()}
TERM_SOURCES = {name: _EVERY_SOURCE[name] for name in TERM_ORDER}


def zerogate_row(counts: ModelCounts, variant: Setup, activations: Activations) -> ZerogateRow:
    """zerogate's terms of one scheme (``variant``: the run's setup with that scheme) and their levels, per
    rank and per node."""
    terms = zerogate_terms(counts, variant, activations)
    other = dataclasses.replace(variant, activation_checkpointing=not variant.activation_checkpointing)
    levels = device_levels(terms.device)
    ranks_per_node = variant.ranks_per_node
    device, host = device_need(terms), host_need(terms, variant.device_kind == "cpu")
    return ZerogateRow(
        device_terms_bytes=terms.device,
        host_terms_per_rank_bytes=terms.host,
        nvme_terms_per_rank_bytes=terms.nvme,
        device_tensor_peak_per_rank_bytes=levels.tensor,
        device_allocator_peak_per_rank_bytes=levels.allocator,
        device_per_rank_bytes=levels.device,
        device_per_rank_other_checkpointing_bytes=device_levels(
            zerogate_terms(counts, other, activations).device
        ).device,
        activations_formula_bytes=activation_bytes(counts, variant, variant.activation_checkpointing),
        host_per_node_bytes=host_need_per_rank(terms, variant.device_kind == "cpu") * ranks_per_node,
        nvme_per_node_bytes=sum(terms.nvme.values()) * ranks_per_node,
        pinned_per_node_bytes=sum(terms.pinned.values()) * ranks_per_node,
        device_per_rank_range_bytes=[device.low, device.high],
        host_per_node_range_bytes=[host.low * ranks_per_node, host.high * ranks_per_node],
    )


def estimator_row(estimate: Estimate | None) -> EstimatorRow | None:
    """DeepSpeed's estimate of a scheme as the ledger lists it (None where DeepSpeed has no estimator)."""
    if estimate is None:
        return None
    return EstimatorRow(device_per_rank_bytes=estimate.device, host_per_node_bytes=estimate.host)


def activation_terms(counts: ModelCounts, setup: Setup, own: ActivationFigures) -> ActivationTerms:
    """The run's own activation figures (``own``) and the formula's beside them."""
    return ActivationTerms(
        basis=own.basis,
        how=own.how,
        per_layer_bytes=own.per_layer_bytes,
        outside_layers_bytes=own.outside_layers_bytes,
        layers=own.layers,
        saved_bytes=own.saved_bytes,
        backward_transient_bytes=own.backward_transient_bytes,
        at_first_gradient_bytes=own.at_first_gradient_bytes,
        after_first_gradient_bytes=own.after_first_gradient_bytes,
        size_classes_bytes=own.size_classes,
        formula_bytes=activation_bytes(counts, setup, setup.activation_checkpointing),
    )


def ledger(counts: ModelCounts, setup: Setup, activations: Activations | None = None) -> Ledger:
    """Every scheme, three ledgers, per rank and per host. ``setup.scheme`` is the run's own scheme."""
    activations = activations or formula_activations(counts)
    paper = paper_ledger(counts.total, setup.ranks)
    estimates = deepspeed_estimates(counts, setup.ranks_per_node, setup.nodes)
    schemes = {
        scheme: SchemeLedger(
            paper=PaperRow(device_per_rank_bytes=paper[scheme]),
            deepspeed=estimator_row(estimates[scheme]),
            zerogate=zerogate_row(counts, setup.with_scheme(scheme), activations),
        )
        for scheme in SCHEMES
    }
    return Ledger(
        parameters=counts.total,
        largest_layer_parameters=counts.largest_layer,
        ranks=setup.ranks,
        nodes=setup.nodes,
        dtype=setup.dtype,
        activation_checkpointing=setup.activation_checkpointing,
        attention=setup.attention,
        micro_batch=setup.micro_batch,
        seq_len=setup.seq_len,
        scheme=setup.scheme,
        activations=activation_terms(counts, setup, activations(setup)),
        term_sources=TERM_SOURCES,
        schemes=schemes,
    )
