"""The probe's collective line and its one size beyond it: the line is fitted on its own sizes only, and a
call's bytes past the line's last size are priced at the rate the probe measured beyond it
(zerogate.predict.collectives.beyond_line, zerogate.predict.step_time_terms.transfer_seconds)."""

from __future__ import annotations

import pytest

from tests.unit.test_floor_comms import cpu_machine, fig
from zerogate.contracts.machine import CollectiveKindFigures, Figure
from zerogate.contracts.plan import CollectivePart
from zerogate.predict import collectives
from zerogate.predict.floor import floor_transfer, measured_beyond
from zerogate.predict.rates import COLLECTIVE_BANDWIDTH
from zerogate.predict.step_time_terms import transfer_seconds
from zerogate.predict.volume import volume_bytes
from zerogate.runtime.collectives import BANDWIDTH_ELEMENTS, LARGE_ELEMENTS, LATENCY_ELEMENTS

LINE_SIZES = (LATENCY_ELEMENTS, *BANDWIDTH_ELEMENTS)
KNEE = max(BANDWIDTH_ELEMENTS)


def gather_seconds(elements: int, latency: float, line_gbps: float, beyond_gbps: float) -> float:
    """A hand-made all-gather on 2 ranks: latency + a rank's volume at ``line_gbps`` up to the line's last
    size, at ``beyond_gbps`` past it."""
    volume = volume_bytes("all_gather", elements * 4, 2)
    knee = volume_bytes("all_gather", KNEE * 4, 2)
    return latency + min(volume, knee) / (line_gbps * 1e9) + max(0.0, volume - knee) / (beyond_gbps * 1e9)


def probe_rows(beyond_gbps: float, slowest_factor: float | None = None) -> list[dict[str, float]]:
    sizes = (*LINE_SIZES, LARGE_ELEMENTS)
    rows = [{"elements": e, "seconds": gather_seconds(e, 0.5e-3, 1.0, beyond_gbps)} for e in sizes]
    if slowest_factor is not None:
        rows = [r | {"slowest_seconds": r["seconds"] * slowest_factor} for r in rows]
    return rows


def kind_figures(rows: list[dict[str, float]]) -> CollectiveKindFigures:
    figures = collectives.figures({"all_gather": rows}, 2, "test")
    return CollectiveKindFigures.of(figures["all_gather"], "test")


def test_the_line_is_fitted_on_its_own_sizes_and_every_size_is_kept():
    gather = kind_figures(probe_rows(beyond_gbps=0.25))
    # The slower size beyond the line does not bend it: latency and bandwidth are those of the line's sizes.
    assert gather.latency_s.value == pytest.approx(0.5e-3)
    assert gather.bandwidth_gbps.value == pytest.approx(1.0)
    assert [s.tensor_bytes for s in gather.samples] == [e * 4 for e in (*LINE_SIZES, LARGE_ELEMENTS)]
    assert collectives.LINE_TENSOR_BYTES == KNEE * 4 < LARGE_ELEMENTS * 4


def test_beyond_the_line_is_the_secant_from_its_last_size_to_the_larger_call():
    gather = kind_figures(probe_rows(beyond_gbps=0.25, slowest_factor=2.0))
    beyond = collectives.beyond_line(gather.samples, "all_gather", 2)
    assert beyond is not None
    assert beyond.from_volume == volume_bytes("all_gather", KNEE * 4, 2)
    assert beyond.bandwidth == pytest.approx(0.25e9)
    # The slowest batches twice the best: the secant through them is half as fast.
    assert beyond.slow_bandwidth == pytest.approx(0.125e9)
    assert "beyond_line" in beyond.source


def test_no_rate_beyond_the_line_without_a_larger_size_or_without_a_slower_call():
    older = [r for r in probe_rows(beyond_gbps=0.25) if r["elements"] != LARGE_ELEMENTS]
    assert collectives.beyond_line(kind_figures(older).samples, "all_gather", 2) is None
    # A larger call no slower than the line's last one shows no rate.
    rows = probe_rows(beyond_gbps=0.25)
    rows[-1]["seconds"] = rows[-2]["seconds"]
    assert collectives.beyond_line(kind_figures(rows).samples, "all_gather", 2) is None
    # Slowest batches faster past the knee than the best: the slow end is never faster than the best.
    rows = probe_rows(beyond_gbps=0.25, slowest_factor=1.0)
    rows[-2]["slowest_seconds"] = rows[-2]["seconds"] * 20
    beyond = collectives.beyond_line(kind_figures(rows).samples, "all_gather", 2)
    assert beyond is not None and beyond.slow_bandwidth == beyond.bandwidth


def test_split_takes_each_calls_bytes_past_the_line_at_their_mean():
    beyond = collectives.BeyondLine(from_volume=100.0, bandwidth=1.0, slow_bandwidth=None, source="test")
    assert beyond.split(4, 300.0) == (300.0, 0.0)  # 75 B a call: all within
    assert beyond.split(2, 300.0) == (200.0, 100.0)  # 150 B a call: 50 B each beyond
    assert beyond.split(0, -20.0) == (-20.0, 0.0)  # no calls (a departure term): nothing beyond


def part(calls: float, volume: float, line_gbps: float = 1.0) -> CollectivePart:
    bandwidth = Figure(value=line_gbps, basis="measured", source="test", low=line_gbps / 2)
    return CollectivePart.model_validate(
        {
            "calls": calls,
            "volume(bytes)": volume,
            "latency": None,
            "bandwidth": bandwidth.model_dump(),
            "latency_time(s)": 0.0,
            "transfer_time(s)": volume / (line_gbps * 1e9),
        }
    )


def test_a_transfer_within_the_line_is_priced_as_before_and_one_beyond_it_at_the_probes_rate():
    beyond = collectives.BeyondLine(from_volume=2e6, bandwidth=0.25e9, slow_bandwidth=0.1e9, source="test")
    within = part(calls=4, volume=4e6)  # 1 MB a call
    plain = transfer_seconds(within, None)
    assert plain is not None and transfer_seconds(within, beyond) == pytest.approx(plain)
    assert plain == pytest.approx((4e-3, max(4e-3 / COLLECTIVE_BANDWIDTH.low, 4e6 / 0.5e9)))
    far = part(calls=1, volume=10e6)  # 2 MB at the line's 1 GB/s, 8 MB at 0.25 GB/s
    low, high = transfer_seconds(far, beyond)
    assert low == pytest.approx(2e6 / 1e9 + 8e6 / 0.25e9)
    assert high == pytest.approx(max(low / COLLECTIVE_BANDWIDTH.low, 2e6 / 0.5e9 + 8e6 / 0.1e9))
    assert transfer_seconds(part(1, 1e6).model_copy(update={"transfer_time_s": None}), beyond) is None


def test_the_ledger_reads_the_rate_beyond_from_a_probed_machines_samples_on_one_node():
    gather = kind_figures(probe_rows(beyond_gbps=0.25, slowest_factor=1.5))
    kinds = {"all_gather": gather.model_dump(mode="json", exclude_none=True)}
    beyond = measured_beyond(cpu_machine(kinds), "all_gather", 1, 2)
    assert beyond is not None and beyond.bandwidth == pytest.approx(0.25e9)
    assert measured_beyond(cpu_machine(kinds), "all_gather", 2, 2) is None
    # A description's figures without samples: nothing beyond the line.
    described = {"all_gather": {"latency_s": fig(1e-3), "bandwidth_gbps": fig(0.5)}}
    assert measured_beyond(cpu_machine(described), "all_gather", 1, 2) is None


def test_the_floor_takes_the_faster_of_the_line_and_the_rate_beyond_it():
    """A larger call measured under the line's extrapolation (a 64 MiB gloo broadcast has been): the floor
    prices the volume past the line's last size at that faster rate, so it stays under every measured call; a
    slower rate beyond leaves the floor on the line."""
    line = Figure(value=1.0, basis="measured", source="test")
    faster = collectives.BeyondLine(from_volume=2e6, bandwidth=4e9, slow_bandwidth=None, source="test")
    slower = collectives.BeyondLine(from_volume=2e6, bandwidth=0.25e9, slow_bandwidth=None, source="test")
    assert floor_transfer(1, 10e6, line, None) == pytest.approx(10e-3)
    assert floor_transfer(1, 10e6, line, slower) == pytest.approx(10e-3)
    assert floor_transfer(1, 10e6, line, faster) == pytest.approx(2e-3 + 8e6 / 4e9)
