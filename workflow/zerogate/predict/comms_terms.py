"""A named communication term (``Term``: calls of one collective kind per micro-step or per optimizer-step
boundary, on full tensors of so many bytes) and the totals of a list of them, per micro-step, per boundary
and per optimizer step. The theories (zerogate.predict.comms, zerogate.predict.fsdp2_comms) return terms;
the floor and the communication table add them up here, with the one volume definition
(zerogate.predict.volume)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from zerogate.predict.volume import volume_bytes

MICRO_STEP = "micro_step"
BOUNDARY = "boundary"


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
