"""Published step times judged against the step-time ledger's interval: inside or outside, the error of the
interval's middle, the width (high / low), and "cannot be judged" with what is missing. Pure: the
prediction is made by zerogate.bench.step_time_predict.

Targets (what the checks against published runs aim at): the published figure inside the predicted
interval on at least ``INSIDE_TARGET`` of the judged rows, every interval no wider than ``WIDTH_TARGET``
(high / low)."""

from __future__ import annotations

import dataclasses

INSIDE_TARGET = 0.75
WIDTH_TARGET = 2.0

INSIDE, OUTSIDE, NOT_JUDGED = "inside", "outside", "cannot be judged"


@dataclasses.dataclass(frozen=True)
class Judged:
    """One row's verdict: ``error`` = published / the interval's middle - 1 (None without an interval),
    ``width`` = high / low, ``why`` what decided it (or what is missing)."""

    verdict: str
    error: float | None
    width: float | None
    why: str


def judge(
    published: float,
    interval: tuple[float, float] | None,
    missing: list[str],
    faster_is_larger: bool = False,
) -> Judged:
    """``published`` against ``interval`` (low, high in the published unit). ``missing``: the terms the
    ledger has no figure for; they only add time, so an interval without them is too fast: a published
    time below its low end (a throughput above its high end, ``faster_is_larger``) is outside even so, and
    anything else cannot be judged."""
    if interval is None:
        return Judged(NOT_JUDGED, None, None, "no interval: " + "; ".join(missing))
    low, high = interval
    middle = (low + high) / 2
    error, width = published / middle - 1, high / low
    faster_than_all = published > high if faster_is_larger else published < low
    if missing:
        if faster_than_all:
            return Judged(
                OUTSIDE, error, width, "faster than the interval even without: " + "; ".join(missing)
            )
        return Judged(NOT_JUDGED, error, width, "terms without a figure: " + "; ".join(missing))
    if low <= published <= high:
        return Judged(INSIDE, error, width, "inside the interval")
    return Judged(OUTSIDE, error, width, "faster than the interval" if faster_than_all else "slower")


def summary_line(verdicts: list[Judged]) -> str:
    """inside k/n of the judged rows against the target, widths at most the target, rows not judged."""
    judged = [v for v in verdicts if v.verdict != NOT_JUDGED]
    inside = sum(v.verdict == INSIDE for v in judged)
    narrow = sum(v.width is not None and v.width <= WIDTH_TARGET for v in judged)
    share = f"{inside / len(judged):.0%}" if judged else "n/a"
    return (
        f"inside {inside}/{len(judged)} judged ({share}; target {INSIDE_TARGET:.0%}), widths <= "
        f"{WIDTH_TARGET:g}x on {narrow}/{len(judged)}, cannot be judged {len(verdicts) - len(judged)}"
        f"/{len(verdicts)}"
    )


# Significant figures an interval is printed with (zerogate.bench.step_time_rows); the first registered sets
# were transcribed from that print, so the ledger's interval now is "the same" as a registered one where it
# differs by less than half the last printed digit (a file --write-predictions wrote holds full floats: a
# change smaller than that is not told apart there either).
PRINTED_DIGITS = 4
PRINTED_RELATIVE = 0.5 * 10 ** (1 - PRINTED_DIGITS)


def same_interval(registered: tuple[float, float] | None, now: tuple[float, float] | None) -> bool:
    """Whether the ledger's interval ``now`` is the one registered (both absent, or equal as printed)."""
    if registered is None or now is None:
        return registered is None and now is None
    return all(abs(n - r) <= PRINTED_RELATIVE * abs(r) for r, n in zip(registered, now, strict=True))
