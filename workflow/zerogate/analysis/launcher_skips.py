"""The optimizer steps the fp16 loss scaler skipped, counted once each from a launcher log's events
(zerogate.analysis.launcher_log). Every rank of an fp16 run without ZeRO prints its own ``Grad overflow`` and
``Reducing dynamic loss scale`` lines, older ZeRO stages print their overflow line on every rank, and the
engine adds one line per skip: the per-line ``overflow`` events stay as they are, and one ``overflow_skip``
event per skipped optimizer step says which lines reported it. Identical lines that may be ranks or
successive steps are counted as one, with an ``ambiguous`` note."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerogate.analysis.launcher_events import STEP_BOUNDARY_KINDS

Signature = tuple[float, float, bool]  # (attempted scale, scale after the skip, whether hysteresis kept it)


@dataclass
class _Skip:
    """One optimizer step the fp16 loss scaler skipped, and the lines that reported it."""

    number: int
    first: dict[str, Any]
    lines: list[int] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    iteration: int | None = None
    signature: Signature | None = None
    boundary: int = 0  # step boundaries seen before its last line
    reported: set[tuple] = field(default_factory=set)  # (kind, names an iteration, rank) of its lines
    repeated: bool = False

    def signature_repeats(self) -> bool:
        """Whether two successive skips could print the same lines: no step named, and no falling scale."""
        return self.iteration is None and (
            self.signature is None or (self.signature[0] == self.signature[1] and not self.signature[2])
        )


REPEATED_SKIP = (
    "identical overflow lines without a rank or a step, at a scale that does not fall: the ranks' "
    "lines of one skip or successive skips at the minimum scale; counted as one"
)


def _evidence(event: dict[str, Any]) -> tuple[int | None, Signature | None]:
    """(the iteration an overflow line names, its scale signature): ``Grad overflow on iteration N`` names
    the one, the lines with scales the other; a bf16 skip names neither."""
    detail = event["detail"]
    if "Grad overflow" in event["message"]:
        return event["step"], None
    if detail.get("attempted") is None:
        return None, None
    hysteresis = detail["new"] is None  # the hysteresis variant: the scale stays
    return None, (detail["attempted"], detail["attempted"] if hysteresis else detail["new"], hysteresis)


def _fits(
    skip: _Skip, reported_by: tuple, iteration: int | None, signature: Signature | None, boundaries: int
) -> bool:
    """Whether an overflow line can be one more report of ``skip``."""
    if iteration is not None and skip.iteration is not None and iteration != skip.iteration:
        return False
    if signature is not None and skip.signature is not None and signature != skip.signature:
        return False
    if reported_by[-1] is not None and reported_by in skip.reported:
        return False  # a rank reports a skip once in each format
    if boundaries > skip.boundary:  # a step went by: only a line naming this very skip belongs to it
        same_step = iteration is not None and iteration == skip.iteration
        same_fall = signature is not None and signature == skip.signature and signature[0] != signature[1]
        return same_step or same_fall
    return True


def skip_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``overflow_skip`` event per optimizer step the loss scaler skipped, from the overflow and
    scale-reduction lines of every rank (see the module docstring)."""
    skips: list[_Skip] = []
    boundaries = 0
    for event in sorted(events, key=lambda e: (e["line"], e["order"])):
        boundaries += event["kind"] in STEP_BOUNDARY_KINDS
        if event["kind"] not in ("overflow", "loss_scale_reduced"):
            continue
        iteration, signature = _evidence(event)
        reported_by = (event["kind"], iteration is not None, event["rank"])
        fitting = [s for s in skips if _fits(s, reported_by, iteration, signature, boundaries)]
        exact = [
            s
            for s in fitting
            if (signature is not None and s.signature == signature)
            or (iteration is not None and s.iteration == iteration)
        ]
        chosen = (exact or fitting)[-1] if fitting else None
        if chosen is None:
            chosen = _Skip(len(skips) + 1, event)
            skips.append(chosen)
        elif (
            event["rank"] is None
            and iteration is None
            and chosen.signature_repeats()
            and signature == chosen.signature
        ):
            chosen.repeated = True
        chosen.lines.append(event["line"])
        chosen.boundary = boundaries
        chosen.reported.add(reported_by)
        if event["rank"] is not None:
            chosen.ranks.add(event["rank"])
        if iteration is not None:
            chosen.iteration = iteration
        if signature is not None:
            chosen.signature = signature
    return [_skip_event(skip) for skip in skips]


def _skip_event(skip: _Skip) -> dict[str, Any]:
    attempted, after, hysteresis = skip.signature if skip.signature else (None, None, False)
    detail: dict[str, Any] = {
        "skip": skip.number,
        "lines": skip.lines,
        "ranks": sorted(skip.ranks),
        "iteration": skip.iteration,
        "attempted": attempted,
        "scale_after": after,
        "hysteresis": hysteresis,
    }
    if skip.repeated:
        detail["ambiguous"] = REPEATED_SKIP
    first = skip.first
    return {
        "kind": "overflow_skip",
        "rank": None,
        "step": skip.iteration if skip.iteration is not None else first["step"],
        "line": first["line"],
        "message": first["message"],
        "detail": detail,
        "order": first["order"] + 0.5,
    }
