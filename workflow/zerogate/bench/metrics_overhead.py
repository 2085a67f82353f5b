"""Overhead of the metrics layer: zerogate's training loop with metrics on and off (`make bench`, target
bench_metrics_overhead).

Two figures: the time spent inside the metrics layer as a share of the loop (measured in the process,
insensitive to machine noise), and the loop wall time with metrics on against off (noisy on a shared
machine). Target: at most 2 %. The runs are the train rule's, with `--no-metrics` for the "off" runs.
"""

from __future__ import annotations

import statistics
from typing import Any

from zerogate.contracts.records import TrainSummary

TARGET_PERCENT = 2.0


def table(on: list[TrainSummary], off: list[TrainSummary]) -> dict[str, Any]:
    """``on``, ``off``: the summary of each run with metrics on, off."""
    on_wall = [s.wall_time_s for s in on]
    off_wall = [s.wall_time_s for s in off]
    inside = [s.metrics_time_s / s.wall_time_s for s in on]
    return {
        "inside_metrics_percent": 100 * statistics.median(inside),
        "wall_time_on(s)": statistics.median(on_wall),
        "wall_time_off(s)": statistics.median(off_wall),
        "overhead_percent": 100 * (statistics.median(on_wall) / statistics.median(off_wall) - 1),
        "runs_on(s)": on_wall,
        "runs_off(s)": off_wall,
        "target_percent": TARGET_PERCENT,
    }


def text(result: dict[str, Any], profile: str, steps: int) -> str:
    runs = ", ".join(
        f"off {a:.2f} s / on {b:.2f} s" for a, b in zip(result["runs_off(s)"], result["runs_on(s)"])
    )
    return "\n".join(
        [
            f"metrics overhead, profile {profile}: {steps} optimizer steps x {len(result['runs_on(s)'])} "
            "repeat(s)",
            f"  time inside the metrics layer: {result['inside_metrics_percent']:.2f} % of the loop (rank 0)",
            f"  loop wall time: metrics on {result['wall_time_on(s)']:.2f} s, off "
            f"{result['wall_time_off(s)']:.2f} s: "
            f"overhead {result['overhead_percent']:+.1f} % (target <= {result['target_percent']:.0f} %; "
            "noisy on a shared machine)",
            # The spread between runs of the same setting says how much of that difference is noise.
            f"  each run: {runs}",
        ]
    )
