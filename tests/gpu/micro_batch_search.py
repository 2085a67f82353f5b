"""The GPU check's search for the largest micro-batch that trains on a capped card
(tests/gpu/check_search.py):
from the plan's own largest, doubling up from a fit or halving down from a refusal until both bounds are
known, then bisecting; it can stop after some probes and go on later, so that every card and point gets its
first probe before any search runs to its end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SEARCH_UPPER = 512  # the largest micro-batch the search tries


@dataclass
class Search:
    """The search for the largest micro-batch in 1..``upper`` that trains, from ``start`` (the plan's
    largest): doubling up from a fit or halving down from a refusal until both bounds are known, then
    bisecting. It can stop after some probes and go on later (:meth:`run`)."""

    start: int
    upper: int = SEARCH_UPPER
    fits: int = 0  # the largest known to train
    refused: int | None = None  # the smallest known not to (None: none yet)
    probes: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why it ended unfinished

    @property
    def done(self) -> bool:
        return self.stopped is not None or self.fits + 1 >= (self.refused or self.upper + 1)

    def next_batch(self) -> int:
        if self.fits == 0 and self.refused is None:  # nothing known yet: the plan's figure
            return min(max(self.start, 1), self.upper)
        if self.refused is None:
            return min(self.upper, 2 * self.fits)
        return max(1, self.refused // 2) if self.fits == 0 else (self.fits + self.refused) // 2

    def run(self, try_batch: Callable[[int], str], probes: int | None = None) -> Search:
        """Probe with ``try_batch`` ("trained"; "out of memory"; anything else stops the search unfinished)
        until done, or ``probes`` more were made."""
        made = 0
        while not self.done and (probes is None or made < probes):
            batch = self.next_batch()
            outcome = try_batch(batch)
            self.probes.append({"micro_batch": batch, "outcome": outcome})
            made += 1
            if outcome == "trained":
                self.fits = batch
            elif outcome == "out of memory":
                self.refused = batch
            else:
                self.stopped = outcome
        return self

    def result(self) -> dict[str, Any]:
        if not self.done:
            status = "unfinished: out of budget"
        elif self.stopped is not None:
            status = f"unfinished: {self.stopped}"
        elif self.fits == 0:
            status = "none fits"
        else:
            status = f"at the search's upper bound {self.upper}" if self.fits == self.upper else "found"
        return {"largest": self.fits or None, "status": status, "probes": self.probes}


def resumed(start: int, earlier: list[dict[str, Any]], upper: int = SEARCH_UPPER) -> Search:
    """A search that goes on from the probes of earlier calls at the same cap (``earlier``: their
    ``micro_batch`` and ``outcome``): the largest that trained and the smallest refused above it are known
    (a refusal at or below a fit, which a probe not repeatable to the byte could give, is left out); the
    probes of this call come after them in ``probes``."""
    fits = max((p["micro_batch"] for p in earlier if p["outcome"] == "trained"), default=0)
    refusals = [
        p["micro_batch"] for p in earlier if p["outcome"] == "out of memory" and p["micro_batch"] > fits
    ]
    search = Search(start, upper, fits=fits, refused=min(refusals, default=None))
    search.probes = [{**p, "earlier": True} for p in earlier if p["outcome"] in ("trained", "out of memory")]
    return search


def search_largest(try_batch: Callable[[int], str], start: int, upper: int = SEARCH_UPPER) -> dict[str, Any]:
    """The whole search (:class:`Search`) at once: the largest micro-batch, the status and the probes."""
    return Search(start, upper).run(try_batch).result()
