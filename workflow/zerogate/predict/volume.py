"""Communication volume: THE volume definition, for the theory and the measured records alike.

Volume (the ZeRO paper, Rajbhandari et al. 2020, section 7): a rank's share of one collective on a full
tensor of S bytes among N ranks, for the bandwidth-optimal (ring) algorithm:

- all-reduce: 2 S (N-1)/N (a reduce-scatter then an all-gather);
- all-gather, reduce-scatter: S (N-1)/N, S the full (gathered / unscattered) tensor;
- broadcast, reduce (to one rank): S (N-1)/N -- the (N-1) S bytes the ring moves in all, shared by N ranks;
- barrier: no payload, 0.

The ring factor (N-1)/N is applied explicitly (``ring_factor``) and the same way to the theory
(zerogate.predict.comms) and to the measured records (``logged_tensor_bytes`` turns a comms-logger record
into S; zerogate.analysis.comms sends measured S through ``volume_bytes`` too). A kind not in
``VOLUME_FACTOR`` has no volume: ``volume_bytes`` raises, and callers keep it apart under its own name rather
than count it as zero.
"""

from __future__ import annotations

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
