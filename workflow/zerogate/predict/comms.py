"""Communication theory per scheme: the collectives one rank takes part in, as named terms.

The theory (``theory``): the ZeRO paper's terms (section 7; the volume definition is zerogate.predict.volume),
then each way DeepSpeed 0.19.8 departs from them as a named term (read from its sources, confirmed by
zerogate.train.comms_volume's measurement):

- ZeRO-0 (``engine.allreduce_gradients``): at the accumulation boundary only, ``buffered_allreduce_fallback``
  all-reduces the flattened gradients in buckets of 5e8 elements (``MEMORY_OPT_ALLREDUCE_SIZE``).
- ZeRO-1/2 (``stage_1_and_2``): the paper counts a reduce-scatter of the gradients and an all-gather of the
  updated parameters. ``average_tensor`` all-reduces the whole bucket instead
  (``use_multi_rank_bucket_allreduce``, on by default; off, it ``dist.reduce``s each slice to its owner);
  ZeRO-1 at the boundary only (``reduce_ready_partitions_and_remove_grads``), ZeRO-2 in every micro-step
  (``partition_gradients``); after the step ``all_gather_dp_groups`` gathers the flat, N-padded group once.
- ZeRO-3 (``stage3``, ``partition_parameters``, ``partitioned_param_coordinator``): every micro-step gathers
  the parameters for the forward and, the paper says, again for the backward, and reduce-scatters every
  gradient (``reduce_scatter_coalesced``, buckets of ``reduce_bucket_size`` elements, each parameter padded
  to a multiple of N). A parameter used again within ``stage3_max_reuse_distance`` elements of the fetch
  trace is not released after the forward (``__params_to_release``), so it is not gathered again
  (zerogate.predict.fetch_trace replays that rule); parameters at or below
  ``stage3_param_persistence_threshold`` elements are never released and are all-gathered once each after
  the step; a tied LM head may gather the embedding again.
- Gradient norm: one scalar all-reduce per step (ZeRO-1..3; ZeRO-0 with gradient clipping).
- Offload (optimizer, parameters) changes where partitions live, not the collectives. Host-device copies
  are not collectives and are not counted here.
- torch FSDP2: zerogate.predict.fsdp2_comms.
- torch DDP with ``no_sync`` during accumulation: one all-reduce of every gradient per optimizer step, in
  buckets (25 MiB, the first 1 MiB: torch's ``bucket_cap_mb`` and ``_DEFAULT_FIRST_BUCKET_BYTES``), and a
  broadcast of the module's buffers before the first forward after a synchronised one (``broadcast_buffers``).

Where a measurement departs from these, the departure is a named ``Term`` here, never a tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP, Term
from zerogate.predict.fetch_trace import padded, zero3_gathers
from zerogate.predict.fsdp2_comms import fsdp2_theory
from zerogate.render.comms_runs import FSDP2, scheme_setup
from zerogate.render.deepspeed_defaults import ZERO0_ALLREDUCE_ELEMENTS, deepspeed_default

# torch DDP's bucket caps (bytes).
DDP_BUCKET_BYTES = 25 * 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1024 * 1024


@dataclass(frozen=True)
class TheoryInputs:
    """What the theory needs of a run besides its model and scheme: the geometry (``accumulation``,
    ``world`` ranks, ``dtype_bytes`` per parameter and gradient), the rendered config's settings as
    DeepSpeed resolves them (zerogate.contracts.comms.TheorySettings; DeepSpeed's defaults where a caller
    gives none, read when the inputs are made) and the model's buffers (``buffer_bytes``, which torch DDP
    broadcasts)."""

    accumulation: int
    world: int
    dtype_bytes: int
    persistence_threshold: int
    reduce_bucket_elements: int = deepspeed_default("reduce_bucket_size")
    prefetch_bucket_elements: int = deepspeed_default("prefetch_bucket_size")
    max_reuse_distance: int = deepspeed_default("max_reuse_distance")
    leaf_blocks: bool = False
    multi_rank_bucket_allreduce: bool = True
    gradient_clipping: float = 0.0
    buffer_bytes: int = 0


def _buckets(elements: float, bucket_elements: float) -> int:
    return max(1, math.ceil(elements / bucket_elements))


def _ddp_buckets(numels: tuple[int, ...], dtype_bytes: int) -> int:
    """Torch DDP's gradient buckets (``_compute_bucket_assignment_by_size``): parameters in reverse order fill
    a bucket until it reaches its limit (the first 1 MiB, then ``bucket_cap_mb``), which closes it."""
    buckets, size, limit = 0, 0, DDP_FIRST_BUCKET_BYTES
    for numel in reversed(numels):
        size += numel * dtype_bytes
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, DDP_BUCKET_BYTES
    return buckets + (1 if size else 0)


def _gather_calls(elements: int, prefetch_bucket_elements: int) -> int:
    """All-gather calls for ``elements`` gathered: the prefetcher coalesces up to a bucket per call
    (measured: one call per micro-step for a model under the bucket). An estimate, for the latency term."""
    return math.ceil(elements / prefetch_bucket_elements) if elements else 0


def _ddp_terms(counts: ModelCounts, run: TheoryInputs) -> list[Term]:
    """Torch DDP: every gradient all-reduced once per optimizer step, and the buffers broadcast."""
    terms = [
        Term(
            "gradient all-reduce",
            "all_reduce",
            BOUNDARY,
            _ddp_buckets(counts.numels, run.dtype_bytes),
            counts.total * run.dtype_bytes,
            "torch DDP all-reduces every gradient once per optimizer step (no_sync before)",
        )
    ]
    if run.buffer_bytes:
        terms.append(
            Term(
                "buffer broadcast",
                "broadcast",
                BOUNDARY,
                1,
                run.buffer_bytes,
                "DDP broadcasts the module's buffers from rank 0 before the first forward after a "
                "synchronised one (broadcast_buffers, its default)",
                departure=True,
            )
        )
    return terms


def _norm_terms(stage: int, offload_optimizer: bool, gradient_clipping: float) -> list[Term]:
    """The gradient norm's scalar all-reduce, where DeepSpeed computes the norm."""
    if not (stage > 0 or gradient_clipping > 0):
        return []
    # Stage 0: runtime/utils.clip_grad_norm_ averages the norm over the data-parallel group (fp32); ZeRO-1/2
    # and ZeRO-3 with optimizer offload sum it in fp32; ZeRO-3 on the device sums it in fp64
    # (get_norm_dtype).
    norm_bytes = 8 if stage == 3 and not offload_optimizer else 4
    return [
        Term(
            "gradient-norm all-reduce",
            "all_reduce",
            BOUNDARY,
            1,
            norm_bytes,
            "one scalar per optimizer step",
            departure=True,
        )
    ]


def _zero0_terms(counts: ModelCounts, run: TheoryInputs) -> list[Term]:
    """ZeRO-0: the flattened gradients all-reduced in buckets at the boundary."""
    return [
        Term(
            "gradient all-reduce",
            "all_reduce",
            BOUNDARY,
            _buckets(counts.total, ZERO0_ALLREDUCE_ELEMENTS),
            counts.total * run.dtype_bytes,
            "engine.buffered_allreduce_fallback at the boundary",
        )
    ]


def _reduce_terms(counts: ModelCounts, per: str, run: TheoryInputs) -> list[Term]:
    """ZeRO-1/2's gradient reduction: the paper's reduce-scatter, and what DeepSpeed sends instead."""
    grads = counts.total * run.dtype_bytes
    buckets = _buckets(counts.total, run.reduce_bucket_elements)
    base = Term(
        "gradient reduce-scatter",
        "reduce_scatter",
        per,
        buckets,
        grads,
        "the paper: each rank receives its partition's reduced gradients",
    )
    if run.multi_rank_bucket_allreduce:
        instead = Term(
            "gradient all-reduced, not reduce-scattered",
            "all_reduce",
            per,
            buckets,
            grads,
            "use_multi_rank_bucket_allreduce (DeepSpeed default): average_tensor all-reduces the bucket",
            departure=True,
        )
    else:
        instead = Term(
            "gradient reduced to each owner, not reduce-scattered",
            "reduce",
            per,
            run.world * buckets,
            grads,
            "average_tensor: dist.reduce of each slice to the rank owning it",
            departure=True,
        )
    return [
        base,
        instead,
        Term(
            "reduce-scatter not sent",
            "reduce_scatter",
            per,
            -buckets,
            -grads,
            "replaced by the term above",
            departure=True,
        ),
    ]


def _zero12_terms(counts: ModelCounts, stage: int, run: TheoryInputs) -> list[Term]:
    """ZeRO-1/2: the gradient reduction (ZeRO-2 every micro-step, ZeRO-1 at the boundary) and the flat
    group's all-gather after the step."""
    flat = padded(counts.total, run.world)  # one flat group, padded to a multiple of N
    terms = _reduce_terms(counts, MICRO_STEP if stage == 2 else BOUNDARY, run)
    terms.append(
        Term(
            "parameter all-gather",
            "all_gather",
            BOUNDARY,
            1,
            counts.total * run.dtype_bytes,
            "all_gather_dp_groups: the updated partitions after the step",
        )
    )
    if flat != counts.total:
        terms.append(
            Term(
                "padding to N ranks",
                "all_gather",
                BOUNDARY,
                0,
                (flat - counts.total) * run.dtype_bytes,
                "the flat group is padded to a multiple of N",
                departure=True,
            )
        )
    return terms


def _zero3_paper_terms(counts: ModelCounts, run: TheoryInputs, gathers: dict[str, int]) -> list[Term]:
    """ZeRO-3's terms as the paper counts them, with DeepSpeed's calls."""
    grads = counts.total * run.dtype_bytes
    padded_all = counts.partition_numel(run.world) * run.world
    return [
        Term(
            "forward parameter all-gather",
            "all_gather",
            MICRO_STEP,
            _gather_calls(gathers["forward"] + gathers["tied"], run.prefetch_bucket_elements),
            grads,
            "every parameter gathered for the forward (the paper)",
        ),
        Term(
            "backward re-gather",
            "all_gather",
            MICRO_STEP,
            _gather_calls(gathers["backward"], run.prefetch_bucket_elements),
            grads,
            "released after the forward, gathered again for the backward (the paper)",
        ),
        Term(
            "gradient reduce-scatter",
            "reduce_scatter",
            MICRO_STEP,
            _buckets(padded_all, run.reduce_bucket_elements),
            grads,
            "reduce_scatter_coalesced of every gradient",
        ),
    ]


def _zero3_departures(counts: ModelCounts, run: TheoryInputs, gathers: dict[str, int]) -> list[Term]:
    """How DeepSpeed's ZeRO-3 departs from the paper's terms (zero terms included: the caller drops them)."""
    b, world, threshold = run.dtype_bytes, run.world, run.persistence_threshold
    persistent = [n for n in counts.numels if n <= threshold]
    non_persistent = counts.total - sum(persistent)
    padded_np = sum(padded(n, world) for n in counts.numels if n > threshold)
    padded_all = counts.partition_numel(world) * world
    return [
        Term(
            "persistent parameters (never released)",
            "all_gather",
            MICRO_STEP,
            0,
            -2 * sum(persistent) * b,
            f"{len(persistent)} parameters of <= {threshold} elements stay gathered: no forward or "
            "backward gather",
        ),
        Term(
            "persistent parameters re-gathered after the step",
            "all_gather",
            BOUNDARY,
            len(persistent),
            sum(padded(n, world) for n in persistent) * b,
            "one all-gather per persistent parameter after the update",
        ),
        Term(
            "parameters kept for reuse (no backward re-gather)",
            "all_gather",
            MICRO_STEP,
            0,
            (gathers["backward"] - padded_np) * b,
            f"used again within stage3_max_reuse_distance ({run.max_reuse_distance:,} elements) of the "
            "trace: not released",
        ),
        Term(
            "tied embedding gathered again for the LM head",
            "all_gather",
            MICRO_STEP,
            0,
            gathers["tied"] * b,
            "the LM head reuses the embedding's weight at the end of the forward",
        ),
        Term(
            "padding to N ranks",
            "all_gather",
            MICRO_STEP,
            0,
            (gathers["forward"] - padded_np) * b + 2 * (padded_np - non_persistent) * b,
            "each parameter is padded to a multiple of N before it is gathered",
        ),
        Term(
            "padding to N ranks (reduce-scatter)",
            "reduce_scatter",
            MICRO_STEP,
            0,
            (padded_all - counts.total) * b,
            "each gradient is padded to a multiple of N before it is reduce-scattered",
        ),
    ]


def _zero3_terms(counts: ModelCounts, run: TheoryInputs) -> list[Term]:
    """ZeRO-3: the paper's terms, then DeepSpeed's departures from them (zero ones left out)."""
    gathers = zero3_gathers(
        counts, run.world, run.persistence_threshold, run.max_reuse_distance, run.leaf_blocks
    )
    departures = _zero3_departures(counts, run, gathers)
    return _zero3_paper_terms(counts, run, gathers) + [
        replace(t, departure=True) for t in departures if t.tensor_bytes or t.calls
    ]


def theory(counts: ModelCounts, scheme: str, run: TheoryInputs) -> list[Term]:
    """The collectives one rank takes part in for ``scheme`` (a zerogate.render.comms_runs scheme), per
    micro-step and per boundary.

    The paper's terms first (``departure`` False: ZeRO paper section 7, accumulation read as DeepSpeed runs
    it), then each way DeepSpeed 0.19.8 departs from them as a named term of its own (``departure`` True;
    negative where it sends less), so that paper + departures = what is sent. Bytes are exact for the
    parameter count; calls are DeepSpeed's bucket arithmetic (the gathers' an estimate, see _gather_calls).
    ``run.accumulation`` decides nothing per micro-step or boundary (``step_totals`` multiplies).
    """
    if run.accumulation < 1:
        raise ValueError(f"accumulation must be >= 1, got {run.accumulation}")
    if scheme == FSDP2:
        return fsdp2_theory(counts, run.world, run.dtype_bytes)
    stage, offload_optimizer, _offload_param = scheme_setup(scheme)
    if stage is None:
        return _ddp_terms(counts, run)
    norm = _norm_terms(stage, offload_optimizer, run.gradient_clipping)
    if stage == 0:
        return _zero0_terms(counts, run) + norm
    if stage in (1, 2):
        return _zero12_terms(counts, stage, run) + norm
    return _zero3_terms(counts, run) + norm
