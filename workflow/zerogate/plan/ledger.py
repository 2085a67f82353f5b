"""The memory ledger: what each rank and each host needs, three ways, for every ZeRO scheme.

(a) ``paper``: the ZeRO paper's model-state formulas (Rajbhandari et al. 2020, K = 12 bytes/param of fp32
    Adam state; docs/reference.md section 1), as the claim quotes them.
(b) ``deepspeed``: DeepSpeed's own estimators, called (never re-typed) on the same counts.
(c) ``zerogate``: model states as DeepSpeed 0.19 actually allocates them (per-parameter partition
    padding included), plus what (a) and (b) leave out: activations at the profile's sequence length and
    micro-batch, gathered-parameter, prefetch and gradient-bucket buffers from the rendered config,
    gradient accumulation, the CUDA context and pinned host memory.

Parameter counts come from the model's config instantiated on the meta device: no weights, so a 14B model
is counted in seconds. Every figure is in bytes (printed by zerogate.units.format_bytes, GiB and GB side by side).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.counts import ModelCounts
from zerogate.units import GIB
# CUDA context + cuBLAS/NCCL workspaces per GPU process: 0.3-0.6 GiB measured by users (docs/reference.md
# section 1); the upper end, so that a "fits" verdict is not optimistic.
CUDA_CONTEXT_BYTES = int(0.6 * GIB)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
DEEPSPEED_MAX_REUSE_DISTANCE = 1_000_000_000  # zero/config.py max_reuse_distance (elements)
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # torch.<name> of each
SCHEMES = ("ddp", "zero1", "zero2", "zero2_offload_optimizer", "zero3", "zero3_offload_optimizer", "zero3_offload_all")


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


def deepspeed_estimates(counts: ModelCounts, gpus_per_node: int, nodes: int = 1) -> dict[str, dict[str, int] | None]:
    """DeepSpeed's estimators on the same counts: per-GPU ``device`` and per-node ``host`` bytes.

    DeepSpeed has none for DDP or ZeRO-1. ``zero_init=True``: zerogate builds models under zero.Init.
    """
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    def z2(offload: bool) -> dict[str, int]:
        host, device = estimate_zero2_model_states_mem_needs(counts.total, gpus_per_node, nodes, cpu_offload=offload)
        return {"device": int(device), "host": int(host)}

    def z3(offload_optimizer: bool, offload_param: bool) -> dict[str, int]:
        host, device, _ = estimate_zero3_model_states_mem_needs(
            counts.total, counts.largest_layer, gpus_per_node, nodes, cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param, zero_init=True)
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


@dataclass(frozen=True)
class Setup:
    """What the ledger needs from the rendered DeepSpeed config, the profile and the machine."""

    ranks: int
    nodes: int
    dtype: str  # fp32 | fp16 | bf16: parameters and gradients on the device
    device_kind: str  # cuda | cpu
    micro_batch: int
    seq_len: int
    accumulation: int
    stage: int
    offload_optimizer: bool
    offload_param: bool
    pin_memory: bool
    reduce_bucket: int  # elements
    prefetch_bucket: int  # elements
    persistence_threshold: int  # elements
    activation_checkpointing: bool = False
    leaf_blocks: bool = False  # a leaf module class beyond DeepSpeed's defaults: whole blocks are gathered
    max_reuse_distance: int = DEEPSPEED_MAX_REUSE_DISTANCE  # elements: a parameter used again sooner stays gathered

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def scheme(self) -> str:
        if self.stage == 0:
            return "ddp"
        if self.stage == 1:
            return "zero1"
        if self.stage == 2:
            return "zero2_offload_optimizer" if self.offload_optimizer else "zero2"
        if self.offload_param:
            return "zero3_offload_all"
        return "zero3_offload_optimizer" if self.offload_optimizer else "zero3"

    def with_scheme(self, scheme: str) -> "Setup":
        stage = {"ddp": 0, "zero1": 1, "zero2": 2, "zero2_offload_optimizer": 2}.get(scheme, 3)
        return dataclasses.replace(self, stage=stage, offload_optimizer="offload" in scheme,
                                   offload_param=scheme == "zero3_offload_all")


def setup_from_config(ds_config: DsConfig, run_spec: RunSpec, nodes: int = 1,
                      activation_checkpointing: bool = False) -> Setup:
    """The ledger's view of a rendered config (``ds_config.json``) and its ``run_spec.json``."""
    from deepspeed.runtime.zero.leaf_module_config import DEFAULT_LEAF_MODULE_CLASSES

    zero = ds_config.zero_optimization
    extra = zero.model_extra or {}
    offloads = [o for o in (zero.offload_optimizer, zero.offload_param) if o is not None]
    leaf_classes = (extra.get("leaf_module") or {}).get("classes", [])
    return Setup(
        ranks=run_spec.world_size, nodes=nodes, dtype=run_spec.dtype, device_kind=run_spec.accelerator,
        micro_batch=ds_config.train_micro_batch_size_per_gpu, seq_len=run_spec.seq_len,
        accumulation=ds_config.gradient_accumulation_steps, stage=int(zero.stage),
        offload_optimizer=bool(zero.offload_optimizer and zero.offload_optimizer.on),
        offload_param=bool(zero.offload_param and zero.offload_param.on),
        pin_memory=any(o.pin_memory for o in offloads), reduce_bucket=int(extra.get("reduce_bucket_size", 5e8)),
        prefetch_bucket=int(extra.get("stage3_prefetch_bucket_size", 5e7)),
        persistence_threshold=int(extra.get("stage3_param_persistence_threshold", 1e5)),
        activation_checkpointing=activation_checkpointing,
        leaf_blocks=any(c not in DEFAULT_LEAF_MODULE_CLASSES for c in leaf_classes),
        max_reuse_distance=int(extra.get("stage3_max_reuse_distance", DEEPSPEED_MAX_REUSE_DISTANCE)),
    )


def activation_bytes(counts: ModelCounts, setup: Setup, checkpointing: bool) -> int:
    """Activations kept for the backward pass of one micro-batch, logits included.

    Per decoder layer s*b*h*(34 + 5*a*s/h) bytes in 16-bit (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", eq. 1), scaled by dtype bytes / 2; with full activation
    checkpointing 2*s*b*h per layer (the layer inputs) plus one layer recomputed in full. Logits: s*b*V in
    the training dtype plus the fp32 upcast and its gradient that the loss computes.
    """
    s, b, h, a = setup.seq_len, setup.micro_batch, counts.hidden, counts.heads
    scale = setup.dtype_bytes / 2
    per_layer = s * b * h * (34 + 5 * a * s / h) * scale
    layers = (2 * s * b * h * scale * counts.layers + per_layer) if checkpointing else per_layer * counts.layers
    logits = s * b * counts.vocab * (setup.dtype_bytes + 4 + 4)
    return int(layers + logits)


def zerogate_terms(counts: ModelCounts, setup: Setup) -> dict[str, dict[str, int]]:
    """zerogate's prediction for ``setup``: per-rank ``device`` terms, per-rank ``host`` terms (offloaded
    state, which lives in the host's RAM), and the ``pinned`` share of the host terms; bytes."""
    n, b, phi = setup.ranks, setup.dtype_bytes, counts.total
    # One rank's share. ZeRO-3 pads every parameter to a multiple of the ranks; ZeRO-1/2 pad the flat group.
    share = counts.partition_numel(n) if setup.stage == 3 else math.ceil(phi / n)
    # A separate fp32 master copy exists unless parameters are fp32 on the device that runs Adam
    # (DeepSpeed 0.19 stage3._create_fp32_partitions; with optimizer offload it always clones).
    master = 0 if (b == 4 and not setup.offload_optimizer) else 4
    device: dict[str, int] = {}
    host: dict[str, int] = {}
    pinned: dict[str, int] = {}

    params_full = phi if setup.stage < 3 else share
    if setup.offload_param:
        host["parameters"] = b * share
    else:
        device["parameters"] = b * params_full
    grads_share = phi if setup.stage < 2 else share
    optimizer_state = {"master_parameters": master * share if setup.stage >= 1 else master * phi,
                       "optimizer_states": 8 * (share if setup.stage >= 1 else phi)}
    if setup.offload_optimizer:
        # Gradient partitions go to a flat fp32 host buffer (stage3 grad_partitions_flat_buffer).
        host["gradients"] = 4 * share
        host.update(optimizer_state)
        if setup.accumulation > 1 and b < 4:
            # 16-bit gradient accumulation partition on the host (docs/reference.md section 1: +2 Phi when G > 1).
            host["gradient_accumulation"] = b * share
    else:
        device["gradients"] = b * grads_share
        device.update(optimizer_state)
    if setup.pin_memory:
        pinned = {k: v for k, v in host.items() if k in ("parameters", "gradients", "gradient_accumulation")}

    if setup.stage == 3:
        device["persistent_parameters"] = b * counts.persistent_numel(setup.persistence_threshold)
        # The module being computed, gathered in full (a whole decoder layer when it is a leaf module),
        # plus the prefetched next ones.
        unit = max(counts.largest_layer, counts.largest_block) if setup.leaf_blocks else counts.largest_layer
        device["gathered_parameters"] = b * (unit + setup.prefetch_bucket)
    if setup.stage >= 2:
        # The largest layer's full gradient before it is reduce-scattered, and the contiguous gradient bucket.
        device["gradient_buckets"] = b * (counts.largest_layer + setup.reduce_bucket)
    else:
        device["gradient_buckets"] = b * setup.reduce_bucket
    device["activations"] = activation_bytes(counts, setup, setup.activation_checkpointing)
    if setup.device_kind == "cuda":
        device["cuda_context"] = CUDA_CONTEXT_BYTES
    return {"device": device, "host": host, "pinned": pinned}


def model_state_bytes(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """The four tensors each rank holds for the whole run, as zerogate.train.held.held_bytes measures them."""
    terms = zerogate_terms(counts, setup)
    merged = {**terms["device"], **terms["host"]}
    return {
        "parameters(bytes)": merged.get("parameters", 0),
        "master_parameters(bytes)": merged.get("master_parameters", 0),
        "gradients(bytes)": merged.get("gradients", 0),
        "optimizer_states(bytes)": merged.get("optimizer_states", 0),
    }


def ledger(counts: ModelCounts, setup: Setup) -> dict[str, Any]:
    """Every scheme, three ledgers, per rank and per host. ``setup.scheme`` is the run's own scheme."""
    ranks_per_node = max(1, setup.ranks // setup.nodes)
    paper = paper_ledger(counts.total, setup.ranks)
    estimates = deepspeed_estimates(counts, ranks_per_node, setup.nodes)
    schemes: dict[str, Any] = {}
    for scheme in SCHEMES:
        variant = setup.with_scheme(scheme)
        terms = zerogate_terms(counts, variant)
        checkpointed = dataclasses.replace(variant, activation_checkpointing=not variant.activation_checkpointing)
        other_activations = activation_bytes(counts, checkpointed, checkpointed.activation_checkpointing)
        device_total = sum(terms["device"].values())
        schemes[scheme] = {
            "paper": {"device_per_rank(bytes)": paper[scheme]},
            "deepspeed": None if estimates[scheme] is None else {
                "device_per_rank(bytes)": estimates[scheme]["device"], "host_per_node(bytes)": estimates[scheme]["host"]},
            "zerogate": {
                "device_terms(bytes)": terms["device"],
                "host_terms_per_rank(bytes)": terms["host"],
                "device_per_rank(bytes)": device_total,
                "device_per_rank_other_checkpointing(bytes)":
                    device_total - terms["device"]["activations"] + other_activations,
                "host_per_node(bytes)": sum(terms["host"].values()) * ranks_per_node,
                "pinned_per_node(bytes)": sum(terms["pinned"].values()) * ranks_per_node,
            },
        }
    return {
        "parameters": counts.total,
        "largest_layer_parameters": counts.largest_layer,
        "ranks": setup.ranks,
        "nodes": setup.nodes,
        "dtype": setup.dtype,
        "activation_checkpointing": setup.activation_checkpointing,
        "scheme": setup.scheme,
        "schemes": schemes,
    }


# --- The rank's peak, not only its model states ------------------------------------------------------

# DeepSpeed's shared-memory all-reduce workspace on the CPU accelerator (deepspeed/ops/csrc/cpu/comm/shm.cpp,
# struct allreduce_workspace: 2 * NAIVE_ALLREDUCE_THRESHOLD + 2 * MAX_BUF_SIZE bytes, 1 MiB and 32 MiB), one
# /dev/shm file per rank, mapped by every rank (zerogate.runtime.launch.shm_buffers): 66 MiB (69.2 MB). A page
# of it is resident only once written, and training's collectives go through gloo, not this op (it serves
# inference_all_reduce): each rank writes the state words of its own workspace and reads the others'. So
# the resident share is one page per rank (RssShmem of a cpu-smollm2 rank: 8 kB), the rest is address space.
SHM_WORKSPACE_BYTES = 2 * 1048576 + 2 * 1048576 * 32
PAGE_BYTES = 4096
# Which terms stay resident for the whole run (what the rank holds between steps) and which come and go
# inside a step (the per-window peak above the window's end): the split the measured per-window peaks
# (memory/peak_rss and memory/rss at the end of each step) can check term by term.
PERSISTENT_TERMS = ("runtime_baseline", "cuda_context", "shm_comm_buffer", "parameters", "master_parameters",
                    "gradients", "gradient_accumulation", "optimizer_states", "persistent_parameters", "reduce_bucket")
TRANSIENT_TERMS = ("gathered_parameters", "gradient_buckets", "activations")


def peak_terms(counts: ModelCounts, setup: Setup, runtime_baseline: int | None) -> dict[str, int]:
    """Each rank's predicted peak, term by term, in bytes.

    On GPUs the allocator's reserved peak: the device terms of :func:`zerogate_terms` (the CUDA context
    among them). On the CPU accelerator the rank's resident-set peak: everything is host RAM, so the
    runtime's own baseline (the probe's measurement of a process with the training ranks' imports, engine
    and data reader, ``runtime_baseline``) plus the device and host terms, plus the resident share of the
    shm comm workspace. Buffers allocated
    at full size but written only in part count as resident only for what is written (an untouched page
    of a CPU tensor is not resident): the reduce bucket and the gathered-parameter window hold at most
    the model's parameters. The reduce bucket (ZeRO-3's contiguous IPG buffer, torch.empty of
    reduce_bucket_size elements at engine init) is kept for the whole run, so once written it stays
    resident: a persistent term (``reduce_bucket``); the largest layer's full gradient before it is copied
    in stays transient (``gradient_buckets``).
    """
    terms = zerogate_terms(counts, setup)
    peak: dict[str, int] = {}
    if setup.device_kind == "cpu":
        peak["runtime_baseline"] = int(runtime_baseline or 0)
        # The baseline process (a one-rank world) already holds its own workspace's state page.
        peak["shm_comm_buffer"] = min(SHM_WORKSPACE_BYTES, PAGE_BYTES * (setup.ranks - 1))
        peak.update(terms["host"])
    peak.update(terms["device"])
    if setup.device_kind == "cpu":
        from zerogate.plan.comms import zero3_most_gathered

        b = setup.dtype_bytes
        if "gathered_parameters" in peak:
            # What ZeRO-3's trace holds gathered at once (parameters used again within the reuse distance stay
            # gathered: on a model below it, the whole model from its forward to its backward; the same
            # simulation as the communication theory's), plus the prefetched bucket, at most the model.
            held = zero3_most_gathered(counts, setup.ranks, setup.persistence_threshold, setup.max_reuse_distance,
                                       setup.leaf_blocks)
            peak["gathered_parameters"] = b * min(counts.total, held + setup.prefetch_bucket)
        peak["reduce_bucket"] = b * min(counts.total, setup.reduce_bucket)
        peak["gradient_buckets"] = b * counts.largest_layer if setup.stage >= 2 else 0
    return peak


def peak_split(terms: dict[str, int]) -> dict[str, int]:
    """The predicted peak as persistent (held between steps) + transient (inside a step), bytes."""
    persistent = sum(v for k, v in terms.items() if k not in TRANSIENT_TERMS)
    transient = sum(v for k, v in terms.items() if k in TRANSIENT_TERMS)
    return {"persistent(bytes)": persistent, "transient(bytes)": transient, "total(bytes)": persistent + transient}
