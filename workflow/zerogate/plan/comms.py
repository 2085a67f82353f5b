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

The theory (``theory``) is what DeepSpeed 0.19.8 does, read from its sources:

- ZeRO-0 (``engine.allreduce_gradients``): at the accumulation boundary only, ``buffered_allreduce_fallback``
  all-reduces the flattened gradients in buckets of 5e8 elements (``MEMORY_OPT_ALLREDUCE_SIZE``).
- ZeRO-1 (``stage_1_and_2``, ``partition_gradients`` False): ``reduce_ready_partitions_and_remove_grads``
  reduces only at the boundary; ``average_tensor`` sends each gradient slice to the rank owning its partition
  with ``dist.reduce`` (one call per destination rank and bucket); after the step the updated partitions
  are all-gathered (``all_gather_dp_groups``: one all-gather of the flat, N-padded group).
- ZeRO-2: the same, but gradients are reduced in every micro-step (``partition_gradients`` True).
- ZeRO-3 (``stage3``, ``partition_parameters``): every micro-step gathers each non-persistent parameter
  for the forward and again for the backward (released in between), and reduce-scatters every gradient
  (``reduce_scatter_coalesced``, buckets of ``reduce_bucket_size`` elements, each parameter padded to a
  multiple of N). Parameters at or below ``stage3_param_persistence_threshold`` elements stay gathered
  (no per-micro-step gather); they are all-gathered again after each optimizer step.
- Offload (optimizer, parameters) changes where partitions live, not the collectives: the same terms.
  Host-device copies are not collectives and are not counted here.
- torch DDP with ``no_sync`` during accumulation: one all-reduce of every gradient per optimizer step, in
  buckets (25 MiB, the first 1 MiB: torch's ``bucket_cap_mb`` and ``_DEFAULT_FIRST_BUCKET_BYTES``).

Where a measurement departs from these, the departure is a named ``Term`` here, never a tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from zerogate.plan.ledger import ModelCounts
from zerogate.plan.variants import VARIANTS

# The schemes measured and theorised, in report order. DeepSpeed ones are zerogate.plan.variants names.
SCHEMES: tuple[str, ...] = ("ddp", "zero0", "zero1", "zero2", "zero3", "zero3-offload", "zero3-offload-all")
DDP = "ddp"

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

# DeepSpeed's bucket for ZeRO-0's gradient all-reduce (engine.MEMORY_OPT_ALLREDUCE_SIZE, elements) and its
# default reduce bucket (zero/config.py); torch DDP's bucket caps (bytes).
ZERO0_BUCKET_ELEMENTS = 500_000_000
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
DDP_BUCKET_BYTES = 25 * 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1024 * 1024

MICRO_STEP = "micro_step"
BOUNDARY = "boundary"


def ring_factor(world: int) -> float:
    """(N-1)/N: the fraction of a full tensor each rank sends (and receives) in a ring collective."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    return (world - 1) / world


def known_kind(kind: str) -> bool:
    return kind in VOLUME_FACTOR


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


def _ddp_buckets(total_bytes: float) -> int:
    rest = max(0.0, total_bytes - DDP_FIRST_BUCKET_BYTES)
    return 1 + (math.ceil(rest / DDP_BUCKET_BYTES) if rest > 0 else 0)


def scheme_setup(scheme: str) -> tuple[int | None, bool, bool]:
    """(ZeRO stage or None for torch DDP, optimizer offload, parameter offload)."""
    if scheme == DDP:
        return None, False, False
    if scheme not in SCHEMES:
        raise KeyError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    return VARIANTS[scheme]


def theory(counts: ModelCounts, scheme: str, accumulation: int, world: int, dtype_bytes: int,
           persistence_threshold: int, *, reduce_bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS) -> list[Term]:
    """The collectives one rank takes part in for ``scheme``, per micro-step and per boundary.

    ``accumulation`` decides nothing per micro-step or boundary (``step_totals`` multiplies); it is taken so
    that terms which exist only with accumulation can be stated. Calls are DeepSpeed's bucket arithmetic;
    bytes are exact for the parameter count given.
    """
    if accumulation < 1:
        raise ValueError(f"accumulation must be >= 1, got {accumulation}")
    stage, _offload_optimizer, _offload_param = scheme_setup(scheme)
    b = dtype_bytes
    grads = counts.total * b
    if stage is None:
        return [Term("gradient all-reduce", "all_reduce", BOUNDARY, _ddp_buckets(grads), grads,
                     "torch DDP all-reduces every gradient once per optimizer step (no_sync before)")]
    if stage == 0:
        return [Term("gradient all-reduce", "all_reduce", BOUNDARY, _buckets(counts.total, ZERO0_BUCKET_ELEMENTS),
                     grads, "engine.buffered_allreduce_fallback at the boundary")]
    # Stages 1 and 2 flatten the parameters into one group padded to a multiple of N.
    flat = math.ceil(counts.total / world) * world
    if stage in (1, 2):
        per = MICRO_STEP if stage == 2 else BOUNDARY
        return [
            Term("gradient reduce", "reduce", per, world * _buckets(counts.total, reduce_bucket_elements), grads,
                 "average_tensor: each slice reduced to the rank owning its partition"
                 + (" in every micro-step" if stage == 2 else " at the boundary")),
            Term("parameter all-gather", "all_gather", BOUNDARY, 1, flat * b,
                 "all_gather_dp_groups: the updated partitions after the step"),
        ]
    persistent = counts.persistent_numel(persistence_threshold)
    gathered = sum(math.ceil(n / world) * world for n in counts.numels if n > persistence_threshold)
    gathered_calls = sum(1 for n in counts.numels if n > persistence_threshold)
    padded_all = counts.partition_numel(world) * world
    persistent_padded = sum(math.ceil(n / world) * world for n in counts.numels if n <= persistence_threshold)
    terms = [
        Term("forward parameter all-gather", "all_gather", MICRO_STEP, gathered_calls, gathered * b,
             "every non-persistent parameter gathered before its module's forward"),
        Term("backward re-gather", "all_gather", MICRO_STEP, gathered_calls, gathered * b,
             "released after the forward, gathered again for the backward"),
        Term("gradient reduce-scatter", "reduce_scatter", MICRO_STEP, _buckets(padded_all, reduce_bucket_elements),
             padded_all * b, "reduce_scatter_coalesced of every gradient, each padded to a multiple of N"),
    ]
    if persistent:
        terms.append(Term("persistent parameters", "all_gather", BOUNDARY, 1, persistent_padded * b,
                          f"parameters of <= {persistence_threshold} elements stay gathered; re-gathered after the step"))
    return terms
