"""FSDP2, ZeRO's peer (zerogate.runtime.engines.Fsdp2Engine): each rank's tensor terms and host need as torch
FSDP2 holds them for the same model, batch and precision."""

from __future__ import annotations

from zerogate.contracts.model import ModelCounts
from zerogate.predict.activation_figures import Activations, formula_activations
from zerogate.predict.cuda_terms import cuda_overhead
from zerogate.predict.host_memory import host_runtime_bytes
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import Setup

# Where FSDP2's own term comes from (the plan's Ledger.term_sources); its other terms are ZeRO's names.
FSDP2_SOURCES = {
    "unsharded_parameters": (
        "FSDP2: the root gathered whole (from its forward to the end of its backward) and two "
        "decoder layers (the one running and the one prefetched), in the compute dtype "
        "(torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py unshard, reshard; the root is "
        "not resharded after its forward: torch/distributed/fsdp/_fully_shard/_fully_shard.py)"
    ),
}


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
    terms.update(cuda_overhead(terms, setup, deepspeed_engine=False))
    return terms


def fsdp2_host_need_per_rank(counts: ModelCounts, setup: Setup, terms: dict[str, int]) -> int:
    """Host RAM one FSDP2 rank needs (``terms``: its fsdp2_terms): its runtime, plus the larger of the model
    as the Fsdp2Engine builds it (whole, in fp32, on every rank, before fully_shard shards it) and what it
    holds on the host in training (with CPUOffloadPolicy on GPUs the sharded parameters, gradients and Adam's
    states, 16 bytes per parameter's share; on the CPU accelerator every tensor)."""
    if setup.device_kind == "cpu":
        held = device_levels(terms).tensor
    else:
        held = 16 * counts.first_dim_shard_numel(setup.ranks) if setup.offload_param else 0
    return host_runtime_bytes(setup) + max(4 * counts.total, held)
