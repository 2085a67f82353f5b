"""What one collective costs between the ranks of this machine: latency and bandwidth, the floor's inputs.

The probe times each collective kind between two local ranks (zerogate.runtime.collective_timing.measure: raw
seconds per call at a small message and at larger ones). This module turns those into figures: latency (s
per call) and bandwidth (GB/s = 1e9 bytes/s) of the line latency + volume / bandwidth, volume the rank's
share of one call (``zerogate.predict.volume.volume_bytes``: the same definition the theory and the measured
records use), that lies at or below every measured call and predicts the most at the largest message
(``lower_line``), fitted on the sizes up to ``LINE_TENSOR_BYTES``. The figures can only under-predict a
collective of those sizes, which is what a floor needs (the tests check it); on a busy machine a larger
message sometimes beats a smaller one, and the line then bends to fit it rather than produce a figure some
call contradicts. The probe's one size beyond the line (64 MiB) gives the time
ledger the rate a call's volume moves at past the line's last size (``beyond_line``); the floor takes the
faster of the two there (zerogate.predict.floor.floor_transfer).

Every figure is a ``{"value", "basis", "source"}`` record (zerogate.contracts.machine.Figure), basis
``measured``, ``published`` or ``derived`` (a machine description may give published or derived figures
for a machine nobody here has); a figure that is not known is absent, and the floor lists it as missing
rather than assuming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from zerogate.predict.volume import volume_bytes
from zerogate.runtime.collectives import BANDWIDTH_ELEMENTS, ELEMENT_BYTES

# The line's sizes end here: a size beyond it is priced by ``beyond_line``, not fitted into the line (one line
# through cache-resident sizes and one beyond the cache would pull the small calls' latency to zero).
LINE_TENSOR_BYTES = max(BANDWIDTH_ELEMENTS) * ELEMENT_BYTES

MEASURED, PUBLISHED, DERIVED = "measured", "published", "derived"
BASES = (MEASURED, PUBLISHED, DERIVED)


def figure(value: float | None, basis: str, source: str) -> dict[str, Any] | None:
    """A figure record, or None for an unknown value (the floor then lists the term as missing)."""
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {basis!r}")
    return None if value is None else {"value": float(value), "basis": basis, "source": source}


def lower_line(points: list[tuple[float, float]]) -> tuple[float, float | None]:
    """(latency, bandwidth) of the line ``seconds = latency + volume / bandwidth`` that lies at or below every
    (volume, seconds) point, latency >= 0, and predicts the most at the largest volume: the tightest bound
    for large messages that no measured call contradicts. Its candidates are the lines through two points
    and through one point with zero latency (the vertices of that linear programme). Bandwidth None: no
    line with a finite bandwidth fits (every larger message was faster); latency is then the fastest call."""
    candidates: list[tuple[float, float]] = []
    for i, (v1, t1) in enumerate(points):
        if v1 > 0:
            candidates.append((0.0, v1 / t1))
        for v2, t2 in points[i + 1 :]:
            if v2 > v1 and t2 > t1:
                bandwidth = (v2 - v1) / (t2 - t1)
                candidates.append((t1 - v1 / bandwidth, bandwidth))
    largest = max(v for v, _ in points)
    fits = [
        (latency, bandwidth)
        for latency, bandwidth in candidates
        if latency >= 0 and all(latency + v / bandwidth <= t * (1 + 1e-9) for v, t in points)
    ]
    if not fits:
        return min(t for _, t in points), None
    return max(
        fits, key=lambda c: (c[0] + largest / c[1], c[0])
    )  # a tie: the larger latency, tighter for small calls


def figures(samples: dict[str, list[dict[str, float]]], world: int, source: str) -> dict[str, dict[str, Any]]:
    """Per kind: latency_s and bandwidth_gbps figures from raw seconds per call (``samples``: kind ->
    [{"elements", "seconds", "slowest_seconds"}]), and the samples themselves in bytes: ``lower_line`` through
    the (rank's volume, seconds) points of the best batches up to LINE_TENSOR_BYTES, so latency + volume /
    bandwidth is at or below every measured call of those sizes; every size is kept in the samples. A latency
    of 0 is a figure (the calls do not show one above 0); a bandwidth no call shows is absent. Where every
    size records its slowest batch, the same line through the slowest batches
    gives the spread between repeats: the latency's ``high`` and the bandwidth's ``low`` where they are
    slower (:func:`slowest_line`)."""
    result: dict[str, dict[str, Any]] = {}
    for kind, measured in samples.items():
        measured = sorted(measured, key=lambda r: r["elements"])
        rows = [r for r in measured if r["elements"] * ELEMENT_BYTES <= LINE_TENSOR_BYTES]
        volumes = [volume_bytes(kind, r["elements"] * ELEMENT_BYTES, world) for r in rows]
        latency, bandwidth = lower_line(list(zip(volumes, [r["seconds"] for r in rows], strict=True)))
        slow_latency, slow_bandwidth = slowest_line(rows, volumes)
        sizes = ", ".join(str(r["elements"] * ELEMENT_BYTES) for r in rows)
        how = (
            f"{source}; the line latency + volume / bandwidth at or below the calls at {sizes} B, largest at "
            "the largest (larger sizes priced beyond it: zerogate.predict.collectives.beyond_line)"
            + (
                "; its slow end the same line through each size's slowest batch"
                if slow_latency is not None
                else ""
            )
        )
        latency_figure = figure(latency, MEASURED, how)
        if latency_figure is not None and slow_latency is not None and slow_latency > latency:
            latency_figure["high"] = slow_latency
        entry: dict[str, Any] = {
            "latency_s": latency_figure,
            "samples": [
                {"tensor_bytes": r["elements"] * ELEMENT_BYTES, "seconds": r["seconds"]}
                | ({"slowest_seconds": r["slowest_seconds"]} if "slowest_seconds" in r else {})
                for r in measured
            ],
        }
        if bandwidth:
            entry["bandwidth_gbps"] = figure(bandwidth / 1e9, MEASURED, how)
            if slow_bandwidth and slow_bandwidth < bandwidth:
                entry["bandwidth_gbps"]["low"] = slow_bandwidth / 1e9
        result[kind] = entry
    return result


def slowest_line(rows: list[dict[str, float]], volumes: list[float]) -> tuple[float | None, float | None]:
    """(latency, bandwidth) of ``lower_line`` through each size's slowest batch: the probe's repeats at their
    slowest, as the best batches give the fast end. (None, None) where a size lacks its slowest batch
    (probes that recorded only the best)."""
    if not rows or any("slowest_seconds" not in r for r in rows):
        return None, None
    return lower_line(list(zip(volumes, [r["slowest_seconds"] for r in rows], strict=True)))


def predicted_seconds(entry: dict[str, Any], kind: str, tensor_bytes: float, world: int) -> float | None:
    """latency + volume / bandwidth for one call: the floor's model of a collective (None if a figure is
    missing)."""
    latency, bandwidth = entry.get("latency_s"), entry.get("bandwidth_gbps")
    if latency is None or bandwidth is None:
        return None
    return latency["value"] + volume_bytes(kind, tensor_bytes, world) / (bandwidth["value"] * 1e9)


def interpret(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe's raw collective timings (zerogate.runtime.collective_timing.measure) as the fingerprint's
    ``collectives``: each kind's latency and bandwidth figures beside its samples."""
    if raw is None:
        return None
    kinds = figures(
        raw.get("samples") or {}, raw["world"], f"probe: {raw['backend']}, {raw['world']} local ranks"
    )
    return {**{k: v for k, v in raw.items() if k != "samples"}, "kinds": kinds}


class Sample(Protocol):
    """One measured size of one kind: the best batch's seconds per call and the slowest's (a description's
    sample or the fingerprint's)."""

    @property
    def tensor_bytes(self) -> float: ...
    @property
    def seconds(self) -> float: ...
    @property
    def slowest_seconds(self) -> float | None: ...


@dataclass(frozen=True)
class BeyondLine:
    """A rank's volume beyond ``from_volume`` bytes per call, at ``bandwidth`` bytes/s (the best batches) to
    ``slow_bandwidth`` (the slowest, never faster; None where the probe did not record them)."""

    from_volume: float
    bandwidth: float
    slow_bandwidth: float | None
    source: str

    def split(self, calls: float, volume: float) -> tuple[float, float]:
        """(near, far) bytes of ``volume`` over ``calls`` calls taken at their mean size: near, up to
        ``from_volume`` a call, at the line's bandwidth; far, the rest, at this one's."""
        if calls <= 0 or volume <= 0:
            return volume, 0.0
        far = calls * max(0.0, volume / calls - self.from_volume)
        return volume - far, far


def beyond_line(samples: list[Sample], kind: str, world: int) -> BeyondLine | None:
    """How a rank's volume moves beyond the line's largest size (LINE_TENSOR_BYTES): the secant between
    that size's call and the largest call measured beyond it, of the best batches (and of the slowest, the
    slower of the two). None where no size beyond the line was measured (a description's figures, an older
    probe) or the larger call was no slower (no rate shows)."""
    line = [s for s in samples if s.tensor_bytes <= LINE_TENSOR_BYTES]
    beyond = [s for s in samples if s.tensor_bytes > LINE_TENSOR_BYTES]
    if not line or not beyond:
        return None
    knee = max(line, key=lambda s: s.tensor_bytes)
    far = max(beyond, key=lambda s: s.tensor_bytes)
    near_volume = volume_bytes(kind, knee.tensor_bytes, world)
    span = volume_bytes(kind, far.tensor_bytes, world) - near_volume
    if far.seconds <= knee.seconds:
        return None
    bandwidth = span / (far.seconds - knee.seconds)
    slow = None
    if knee.slowest_seconds is not None and far.slowest_seconds is not None:
        slow = (
            bandwidth
            if far.slowest_seconds <= knee.slowest_seconds
            else min(bandwidth, span / (far.slowest_seconds - knee.slowest_seconds))
        )
    return BeyondLine(
        from_volume=near_volume,
        bandwidth=bandwidth,
        slow_bandwidth=slow,
        source=(
            f"beyond {knee.tensor_bytes:.4g} B a call: the secant to the probe's {far.tensor_bytes:.4g} B "
            "call, "
            f"{bandwidth / 1e9:.4g}"
            + ("" if slow is None or slow >= bandwidth else f" to {slow / 1e9:.4g}")
            + " GB/s (zerogate.predict.collectives.beyond_line)"
        ),
    )
