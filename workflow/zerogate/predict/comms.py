"""Communication volume per scheme: THE volume definition, and the theory of what each scheme sends.

Volume (the ZeRO paper, Rajbhandari et al. 2020, section 7): a rank's share of one collective on a full
tensor of S bytes among N ranks, for the bandwidth-optimal (ring) algorithm:

- all-reduce: 2 S (N-1)/N (a reduce-scatter then an all-gather);
- all-gather, reduce-scatter: S (N-1)/N, S the full (gathered / unscattered) tensor;
- broadcast, reduce (to one rank): S (N-1)/N -- the (N-1) S bytes the ring moves in all, shared by N ranks;
- barrier: no payload, 0.

The ring factor (N-1)/N is applied explicitly (``ring_factor``) and the same way to the theory and to the
measured records (``logged_tensor_bytes`` turns a comms-logger record into S; zerogate.analysis.comms sends
measured S through ``volume_bytes`` too). A kind not in ``VOLUME_FACTOR`` has no volume: ``volume_bytes``
raises, and callers keep it apart under its own name rather than count it as zero.

The theory (``theory``): the ZeRO paper's terms, then each way DeepSpeed 0.19.8 departs from them as a named
term (read from its sources, confirmed by zerogate.train.comms_volume's measurement):

- ZeRO-0 (``engine.allreduce_gradients``): at the accumulation boundary only, ``buffered_allreduce_fallback``
  all-reduces the flattened gradients in buckets of 5e8 elements (``MEMORY_OPT_ALLREDUCE_SIZE``).
- ZeRO-1/2 (``stage_1_and_2``): the paper counts a reduce-scatter of the gradients and an all-gather of the
  updated parameters. ``average_tensor`` all-reduces the whole bucket instead
  (``use_multi_rank_bucket_allreduce``,
  on by default; off, it ``dist.reduce``s each slice to its owner); ZeRO-1 at the boundary only
  (``reduce_ready_partitions_and_remove_grads``), ZeRO-2 in every micro-step (``partition_gradients``); after
  the step ``all_gather_dp_groups`` gathers the flat, N-padded group once.
- ZeRO-3 (``stage3``, ``partition_parameters``, ``partitioned_param_coordinator``): every micro-step gathers
the
  parameters for the forward and, the paper says, again for the backward, and reduce-scatters every gradient
  (``reduce_scatter_coalesced``, buckets of ``reduce_bucket_size`` elements, each parameter padded to a
  multiple
  of N). A parameter used again within ``stage3_max_reuse_distance`` elements of the fetch trace is not
  released after the forward (``__params_to_release``), so it is not gathered again (``zero3_gathers`` replays
  that rule); parameters at or below ``stage3_param_persistence_threshold`` elements are never released and
  are
  all-gathered once each after the step; a tied LM head may gather the embedding again.
- Gradient norm: one scalar all-reduce per step (ZeRO-1..3; ZeRO-0 with gradient clipping).
- Offload (optimizer, parameters) changes where partitions live, not the collectives. Host-device copies
  are not collectives and are not counted here.
- torch FSDP2 as zerogate.runtime.engines.Fsdp2Engine wraps the model (``fully_shard`` on each decoder layer,
  then on the root, which holds the rest: embeddings, final norm, LM head): the paper's ZeRO-3 terms per
  unit, one call each. Every micro-step all-gathers each unit for its forward, each decoder layer again for
  its backward (resharded after its forward) but not the root (``reshard_after_forward`` is False at the
  root), and reduce-scatters each unit's gradients, always in fp32 (the engine's reduce dtype); each
  parameter is padded along its first dimension to a multiple of N (FSDP2 shards dim 0). At the step,
  ``clip_grad_norm_`` over the sharded gradients all-reduces one fp32 per parameter (the local norms,
  stacked).
- torch DDP with ``no_sync`` during accumulation: one all-reduce of every gradient per optimizer step, in
  buckets (25 MiB, the first 1 MiB: torch's ``bucket_cap_mb`` and ``_DEFAULT_FIRST_BUCKET_BYTES``), and a
  broadcast of the module's buffers before the first forward after a synchronised one (``broadcast_buffers``).

Where a measurement departs from these, the departure is a named ``Term`` here, never a tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from zerogate.contracts.comms import CommsMeasurement, CommsPlan, TheorySettings
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.counts import ModelCounts
from zerogate.predict.fetch_trace import padded, zero3_gathers
from zerogate.predict.setup import DEEPSPEED_MAX_REUSE_DISTANCE, ZERO0_ALLREDUCE_ELEMENTS
from zerogate.render.ds_config import apply_overrides
from zerogate.render.variants import PEERS, VARIANTS, engine_of, variant_config

# The schemes measured and theorised, in report order. DeepSpeed ones and FSDP2 are zerogate.render.variants
# names.
SCHEMES: tuple[str, ...] = (
    "ddp",
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero3-offload",
    "zero3-offload-all",
    "fsdp2",
)
DDP = "ddp"
FSDP2 = "fsdp2"
# FSDP2 reduce-scatters gradients in fp32 whatever the compute dtype (Fsdp2Engine: no policy in fp32,
# MixedPrecisionPolicy(reduce_dtype=float32) under bf16), and its sharded gradients are fp32.
FSDP2_REDUCE_BYTES = 4

# A rank's share of one collective on a full tensor of S bytes, in units of S x ring_factor(N).
VOLUME_FACTOR: dict[str, int] = {
    "all_reduce": 2,
    "all_gather": 1,
    "reduce_scatter": 1,
    "broadcast": 1,
    "reduce": 1,
    "barrier": 0,
}

# deepspeed.comm's comms-logger record names (the collective function's name) -> (kind, how the logged
# message size relates to S). deepspeed.comm.utils.get_msg_size_from_args logs the size of the argument
# called ``tensor`` (or the summed ``input_list``): for all_gather_into_tensor and all_gather that is the
# rank's input partition, S / N; for the others it is the full tensor S.
_LOGGED_KINDS: dict[str, tuple[str, bool]] = {
    "all_reduce": ("all_reduce", False),
    "all_reduce_coalesced": ("all_reduce", False),
    "inference_all_reduce": ("all_reduce", False),
    "all_gather_into_tensor": ("all_gather", True),
    "all_gather": ("all_gather", True),
    "reduce_scatter_tensor": ("reduce_scatter", False),
    "reduce_scatter": ("reduce_scatter", False),
    "broadcast": ("broadcast", False),
    "reduce": ("reduce", False),
    "barrier": ("barrier", False),
}

# DeepSpeed's default reduce bucket (zero/config.py; ZeRO-0's all-reduce bucket is the ledger's
# ZERO0_ALLREDUCE_ELEMENTS); torch DDP's bucket caps (bytes).
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
DEEPSPEED_PREFETCH_BUCKET_ELEMENTS = 50_000_000  # zero/config.py prefetch_bucket_size
DDP_BUCKET_BYTES = 25 * 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1024 * 1024

MICRO_STEP = "micro_step"
BOUNDARY = "boundary"


def ring_factor(world: int) -> float:
    """(N-1)/N: the fraction of a full tensor each rank sends (and receives) in a ring collective."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    return (world - 1) / world


def volume_bytes(kind: str, tensor_bytes: float, world: int) -> float:
    """A rank's share of one ``kind`` collective on a full tensor of ``tensor_bytes`` bytes (S) among
    ``world`` ranks. An unknown kind raises: it is never counted as zero."""
    if kind not in VOLUME_FACTOR:
        raise KeyError(f"no volume definition for collective kind {kind!r}")
    return VOLUME_FACTOR[kind] * tensor_bytes * ring_factor(world)


def logged_kind(log_name: str) -> str | None:
    """The volume kind of a comms-logger record name; None for a name with no definition here."""
    entry = _LOGGED_KINDS.get(log_name)
    return entry[0] if entry else None


def logged_tensor_bytes(log_name: str, msg_bytes: float, world: int) -> float:
    """S (the full tensor's bytes) of one comms-logger record of ``msg_bytes``. Raises for unknown names."""
    if log_name not in _LOGGED_KINDS:
        raise KeyError(f"no volume definition for comms-logger record {log_name!r}")
    _, input_is_partition = _LOGGED_KINDS[log_name]
    return msg_bytes * world if input_is_partition else msg_bytes


@dataclass(frozen=True)
class Term:
    """One named communication term: ``calls`` collectives of ``kind`` per micro-step or per optimizer-step
    boundary, on full tensors summing to ``tensor_bytes`` (S) per micro-step or boundary."""

    name: str
    kind: str
    per: str  # MICRO_STEP | BOUNDARY
    calls: float
    tensor_bytes: float
    why: str = ""
    departure: bool = False  # not in the ZeRO paper's count: how DeepSpeed departs from it (may be negative)

    def volume(self, world: int) -> float:
        return volume_bytes(self.kind, self.tensor_bytes, world)


def totals(terms: Iterable[Term], per: str, world: int) -> tuple[float, float]:
    """(collective calls, volume bytes) of ``terms`` per micro-step or per boundary."""
    if per not in (MICRO_STEP, BOUNDARY):
        raise ValueError(f"per must be {MICRO_STEP!r} or {BOUNDARY!r}, got {per!r}")
    chosen = [t for t in terms if t.per == per]
    return sum(t.calls for t in chosen), sum(t.volume(world) for t in chosen)


def per_optimizer_step(term: Term, accumulation: int) -> tuple[float, float]:
    """(calls, S bytes) of ``term`` per optimizer step of ``accumulation`` micro-steps."""
    times = accumulation if term.per == MICRO_STEP else 1
    return term.calls * times, term.tensor_bytes * times


def step_totals(terms: Iterable[Term], accumulation: int, world: int) -> tuple[float, float]:
    """(collective calls, volume bytes) per optimizer step: G x micro-step + boundary."""
    terms = list(terms)
    micro_calls, micro_volume = totals(terms, MICRO_STEP, world)
    boundary_calls, boundary_volume = totals(terms, BOUNDARY, world)
    return accumulation * micro_calls + boundary_calls, accumulation * micro_volume + boundary_volume


def _buckets(elements: float, bucket_elements: float) -> int:
    return max(1, math.ceil(elements / bucket_elements))


def _ddp_buckets(numels: tuple[int, ...], dtype_bytes: int) -> int:
    """Torch DDP's gradient buckets (``_compute_bucket_assignment_by_size``): parameters in reverse order fill
    a
    bucket until it reaches its limit (the first 1 MiB, then ``bucket_cap_mb``), which closes it."""
    buckets, size, limit = 0, 0, DDP_FIRST_BUCKET_BYTES
    for numel in reversed(numels):
        size += numel * dtype_bytes
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, DDP_BUCKET_BYTES
    return buckets + (1 if size else 0)


def engine_of_scheme(scheme: str) -> str:
    """What trains ``scheme`` (a zerogate.runtime.engines name)."""
    return "ddp" if scheme == DDP else engine_of(scheme)


def scheme_setup(scheme: str) -> tuple[int | None, bool, bool]:
    """(ZeRO stage or None for torch DDP, optimizer offload, parameter offload). Any name of
    zerogate.render.variants.VARIANTS has a theory (the measured ones are SCHEMES)."""
    if scheme == DDP:
        return None, False, False
    if scheme == FSDP2:
        return VARIANTS[PEERS[scheme].config_of]
    if scheme not in VARIANTS:
        raise KeyError(f"unknown scheme {scheme!r}; known: {DDP}, {', '.join(VARIANTS)}, {FSDP2}")
    return VARIANTS[scheme]


def scheme_for(stage: int, offload_optimizer: bool, offload_param: bool) -> str:
    """The DeepSpeed scheme name of a ZeRO stage and its offloads (a zerogate.predict.ledger.Setup's), for
    ``theory``. Stage 0 is DeepSpeed's ZeRO-0 ("zero0"), not torch DDP."""
    wanted = (stage, offload_optimizer, offload_param)
    for name, setup in VARIANTS.items():
        if setup == wanted:
            return name
    raise KeyError(
        f"no scheme for ZeRO stage {stage} with offload_optimizer={offload_optimizer}, "
        f"offload_param={offload_param}"
    )


def _gather_calls(elements: int, prefetch_bucket_elements: int) -> int:
    """All-gather calls for ``elements`` gathered: the prefetcher coalesces up to a bucket per call
    (measured: one call per micro-step for a model under the bucket). An estimate, for the latency term."""
    return math.ceil(elements / prefetch_bucket_elements) if elements else 0


def _reduce_terms(
    counts: ModelCounts,
    per: str,
    world: int,
    b: int,
    reduce_bucket_elements: int,
    multi_rank_bucket_allreduce: bool,
) -> list[Term]:
    """ZeRO-1/2's gradient reduction: the paper's reduce-scatter, and what DeepSpeed sends instead."""
    grads = counts.total * b
    buckets = _buckets(counts.total, reduce_bucket_elements)
    base = Term(
        "gradient reduce-scatter",
        "reduce_scatter",
        per,
        buckets,
        grads,
        "the paper: each rank receives its partition's reduced gradients",
    )
    if multi_rank_bucket_allreduce:
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
            world * buckets,
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


def fsdp2_theory(counts: ModelCounts, world: int, dtype_bytes: int) -> list[Term]:
    """The collectives one rank takes part in under torch FSDP2 (the module docstring), per micro-step and
    per boundary: the paper's ZeRO-3 terms, then FSDP2's departures from them."""
    units, root, layers = counts.layer_units(), counts.root_indices(), counts.decoder_layers()
    b, reduce_b = dtype_bytes, FSDP2_REDUCE_BYTES
    layer_indices = [i for unit in layers for i in unit]
    terms = [
        Term(
            "forward parameter all-gather",
            "all_gather",
            MICRO_STEP,
            len(units),
            counts.total * b,
            "each unit (the root, every decoder layer) gathered for its forward (the paper)",
        ),
        Term(
            "backward re-gather",
            "all_gather",
            MICRO_STEP,
            len(units),
            counts.total * b,
            "resharded after the forward, gathered again for the backward (the paper)",
        ),
        Term(
            "gradient reduce-scatter",
            "reduce_scatter",
            MICRO_STEP,
            len(units),
            counts.total * reduce_b,
            "each unit's gradients reduce-scattered in fp32 after its backward, every micro-batch",
        ),
    ]
    departures = [
        Term(
            "root kept gathered for the backward",
            "all_gather",
            MICRO_STEP,
            -1 if root else 0,
            -counts.root_numel() * b,
            "reshard_after_forward is False at the root: its parameters stay gathered from forward to "
            "backward",
        ),
        Term(
            "padding to N ranks",
            "all_gather",
            MICRO_STEP,
            0,
            (
                counts.first_dim_padded_numel(world)
                - counts.total
                + counts.first_dim_padded_numel(world, layer_indices)
                - sum(counts.numels[i] for i in layer_indices)
            )
            * b,
            "each parameter is padded along its first dimension to a multiple of N before it is gathered",
        ),
        Term(
            "padding to N ranks (reduce-scatter)",
            "reduce_scatter",
            MICRO_STEP,
            0,
            (counts.first_dim_padded_numel(world) - counts.total) * reduce_b,
            "each gradient is padded along its first dimension to a multiple of N before it is "
            "reduce-scattered",
        ),
        Term(
            "gradient-norm all-reduce",
            "all_reduce",
            BOUNDARY,
            1,
            len(counts.numels) * reduce_b,
            "clip_grad_norm_ over the sharded gradients: each parameter's local norm, stacked, all-reduced "
            "once",
        ),
    ]
    return terms + [replace(t, departure=True) for t in departures if t.tensor_bytes or t.calls]


def theory(
    counts: ModelCounts,
    scheme: str,
    accumulation: int,
    world: int,
    dtype_bytes: int,
    persistence_threshold: int,
    *,
    reduce_bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    prefetch_bucket_elements: int = DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
    max_reuse_distance: int = DEEPSPEED_MAX_REUSE_DISTANCE,
    leaf_blocks: bool = False,
    multi_rank_bucket_allreduce: bool = True,
    gradient_clipping: float = 0.0,
    buffer_bytes: int = 0,
) -> list[Term]:
    """The collectives one rank takes part in for ``scheme``, per micro-step and per boundary.

    The paper's terms first (``departure`` False: ZeRO paper section 7, accumulation read as DeepSpeed runs
    it), then each way DeepSpeed 0.19.8 departs from them as a named term of its own (``departure`` True;
    negative where it sends less), so that paper + departures = what is sent. Bytes are exact for the
    parameter count; calls are DeepSpeed's bucket arithmetic (the gathers' an estimate, see _gather_calls).
    ``accumulation`` decides nothing per micro-step or boundary (``step_totals`` multiplies).
    """
    if accumulation < 1:
        raise ValueError(f"accumulation must be >= 1, got {accumulation}")
    if scheme == FSDP2:
        return fsdp2_theory(counts, world, dtype_bytes)
    stage, offload_optimizer, _offload_param = scheme_setup(scheme)
    b = dtype_bytes
    grads = counts.total * b
    if stage is None:
        terms = [
            Term(
                "gradient all-reduce",
                "all_reduce",
                BOUNDARY,
                _ddp_buckets(counts.numels, b),
                grads,
                "torch DDP all-reduces every gradient once per optimizer step (no_sync before)",
            )
        ]
        if buffer_bytes:
            terms.append(
                Term(
                    "buffer broadcast",
                    "broadcast",
                    BOUNDARY,
                    1,
                    buffer_bytes,
                    "DDP broadcasts the module's buffers from rank 0 before the first forward after a "
                    "synchronised one (broadcast_buffers, its default)",
                    departure=True,
                )
            )
        return terms
    norm = []
    if stage > 0 or gradient_clipping > 0:
        # Stage 0: runtime/utils.clip_grad_norm_ averages the norm over the data-parallel group (fp32);
        # ZeRO-1/2
        # and ZeRO-3 with optimizer offload sum it in fp32; ZeRO-3 on the device sums it in fp64
        # (get_norm_dtype).
        norm_bytes = 8 if stage == 3 and not offload_optimizer else 4
        norm = [
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
    if stage == 0:
        return [
            Term(
                "gradient all-reduce",
                "all_reduce",
                BOUNDARY,
                _buckets(counts.total, ZERO0_ALLREDUCE_ELEMENTS),
                grads,
                "engine.buffered_allreduce_fallback at the boundary",
            ),
            *norm,
        ]
    if stage in (1, 2):
        flat = padded(counts.total, world)  # one flat group, padded to a multiple of N
        terms = _reduce_terms(
            counts,
            MICRO_STEP if stage == 2 else BOUNDARY,
            world,
            b,
            reduce_bucket_elements,
            multi_rank_bucket_allreduce,
        )
        terms.append(
            Term(
                "parameter all-gather",
                "all_gather",
                BOUNDARY,
                1,
                grads,
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
                    (flat - counts.total) * b,
                    "the flat group is padded to a multiple of N",
                    departure=True,
                )
            )
        return terms + norm
    persistent = [n for n in counts.numels if n <= persistence_threshold]
    persistent_numel = sum(persistent)
    non_persistent = counts.total - persistent_numel
    padded_np = sum(padded(n, world) for n in counts.numels if n > persistence_threshold)
    padded_all = counts.partition_numel(world) * world
    gathers = zero3_gathers(counts, world, persistence_threshold, max_reuse_distance, leaf_blocks)
    terms = [
        Term(
            "forward parameter all-gather",
            "all_gather",
            MICRO_STEP,
            _gather_calls(gathers["forward"] + gathers["tied"], prefetch_bucket_elements),
            grads,
            "every parameter gathered for the forward (the paper)",
        ),
        Term(
            "backward re-gather",
            "all_gather",
            MICRO_STEP,
            _gather_calls(gathers["backward"], prefetch_bucket_elements),
            grads,
            "released after the forward, gathered again for the backward (the paper)",
        ),
        Term(
            "gradient reduce-scatter",
            "reduce_scatter",
            MICRO_STEP,
            _buckets(padded_all, reduce_bucket_elements),
            grads,
            "reduce_scatter_coalesced of every gradient",
        ),
    ]
    departures = [
        Term(
            "persistent parameters (never released)",
            "all_gather",
            MICRO_STEP,
            0,
            -2 * persistent_numel * b,
            f"{len(persistent)} parameters of <= {persistence_threshold} elements stay gathered: no forward "
            "or "
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
            f"used again within stage3_max_reuse_distance ({max_reuse_distance:,} elements) of the trace: "
            "not released",
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
    return terms + [replace(t, departure=True) for t in departures if t.tensor_bytes or t.calls] + norm


# The comms logger's config block (deepspeed/comm/config.py): every collective, no per-call printing.
COMMS_LOGGER = {"enabled": True, "prof_all": True, "verbose": False, "debug": False}


def accumulations(ds_config: dict[str, Any]) -> tuple[int, ...]:
    """The accumulations measured: 1 and the rendered config's (once when that is 1)."""
    profile = int(ds_config["gradient_accumulation_steps"])
    return (1,) if profile == 1 else (1, profile)


def measurement_config(
    ds_config: dict[str, Any], scheme: str, accumulation: int, world: int
) -> dict[str, Any]:
    """The rendered config as ``scheme`` runs it at ``accumulation``, with the comms logger on.

    DeepSpeed schemes are zerogate.render.variants' overrides; torch DDP takes ZeRO-0's (it reads only the
    batch geometry, the optimizer and the clipping from it); FSDP2 the config its variant reads (ZeRO-3's).
    The global batch follows the accumulation.
    """
    scheme_setup(scheme)  # an unknown scheme fails here, before any work
    config, _ = variant_config(ds_config, "zero0" if scheme == DDP else scheme)
    micro = int(config["train_micro_batch_size_per_gpu"])
    return apply_overrides(
        config,
        [
            {"path": "gradient_accumulation_steps", "value": accumulation},
            {"path": "train_batch_size", "value": micro * accumulation * world},
            {"path": "comms_logger", "value": dict(COMMS_LOGGER)},
        ],
    )


def theory_settings(config: dict[str, Any], setup: Any) -> TheorySettings:
    """The settings zerogate.predict.comms.theory takes, as DeepSpeed resolves them (its own config class)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = DeepSpeedZeroConfig(**config.get("zero_optimization", {}))
    return TheorySettings(
        persistence_threshold=setup.persistence_threshold,
        reduce_bucket_elements=int(zero.reduce_bucket_size),
        prefetch_bucket_elements=int(zero.prefetch_bucket_size),
        max_reuse_distance=int(zero.max_reuse_distance),
        leaf_blocks=setup.leaf_blocks,
        multi_rank_bucket_allreduce=bool(zero.use_multi_rank_bucket_allreduce),
        gradient_clipping=float(config.get("gradient_clipping", 0.0)),
    )


def measurements(ds_config: DsConfig, run_spec: RunSpec) -> CommsPlan:
    """Every scheme at every measured accumulation, as the measuring worker (zerogate.train.comms_volume) runs
    it: the DeepSpeed config (measurement_config), the ledger's reading of it and the theory's settings, and
    the run's model counted as the planner counts it."""
    from zerogate.model.build import planned_model_config
    from zerogate.model.counts import count_parameters
    from zerogate.predict.setup import setup_from_config

    rendered = ds_config.raw
    found = []
    for scheme in SCHEMES:
        for accumulation in accumulations(rendered):
            config = measurement_config(rendered, scheme, accumulation, run_spec.world_size)
            setup = setup_from_config(DsConfig.of(config, "the measurement config"), run_spec)
            found.append(
                CommsMeasurement(
                    scheme=scheme,
                    engine=engine_of_scheme(scheme),
                    accumulation=accumulation,
                    ds_config=config,
                    dtype=setup.dtype,
                    dtype_bytes=setup.dtype_bytes,
                    theory_settings=theory_settings(config, setup),
                )
            )
    counts = count_parameters(planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len))
    return CommsPlan(measurements=found, counts=counts)
