"""Step time of ZeRO's peers against DeepSpeed ZeRO-3, same model, data, seed and loop, in one invocation
(`make bench-peers`, target bench_peers_vs_zero3): each row's median step time (the slowest rank's,
zerogate.analysis.measures.step_time) with its interval, and its ratio to ZeRO-3 with the ratio's interval
(zerogate.analysis.intervals.ratio_interval: each run's stationary-bootstrap replicates divided), then the
peers' loss curves against the ZeRO variants they train from (zerogate.analysis.variants.loss_agreement, its
tolerance from ZeRO-1 and ZeRO-2).

The runs are the variants' own (rule train_variant on the profile's data): one run per row, so the
intervals cover the step-to-step variation within each run, not what differs from one run to the next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.intervals import ratio_interval
from zerogate.analysis.measures import step_time
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import loss_agreement
from zerogate.contracts.summary import IntervalRule
from zerogate.render.variants import PEERS_BENCHMARK as ROWS
from zerogate.render.variants import what_of

REFERENCE = ROWS[0]  # ZeRO-3: what every ratio divides by
STATISTIC = "step_time_median_s"


def table(metrics: dict[str, str | Path], warmup_steps: int, rule: IntervalRule) -> dict[str, Any]:
    """``metrics``: row -> its run's metrics directory."""
    steps = {name: read_rank_metrics(metrics[name]) for name in ROWS}
    replicates = {name: timing_replicates([steps[name]], warmup_steps, rule) for name in ROWS}
    reference = replicates[REFERENCE]
    rows = []
    for name in ROWS:
        median = step_time(steps[name], warmup_steps).value
        own = replicates[name]
        interval = None if own is None else own.interval(STATISTIC)
        ratio = None if own is None or reference is None else ratio_interval(own, reference, STATISTIC)
        rows.append(
            {
                "run": name,
                "label": what_of(name),
                "step_time(s)": median,
                "step_time_interval(s)": None if interval is None else [interval.low, interval.high],
                "ratio_to_zero3": median / step_time(steps[REFERENCE], warmup_steps).value,
                "ratio_interval": None if ratio is None else [ratio.low, ratio.high],
            }
        )
    agreement = [a.model_dump(by_alias=True) for a in loss_agreement(steps)]
    return {
        "warmup_steps": warmup_steps,
        "confidence": rule.confidence,
        "rows": rows,
        "loss_agreement": agreement,
    }


def text(result: dict[str, Any], profile: str, steps: int) -> str:
    lines = [
        f"ZeRO's peers vs ZeRO-3, profile {profile}: {steps} optimizer steps, one run per row; step time = "
        "median "
        f"after {result['warmup_steps']} warm-up steps, slowest rank, [{100 * result['confidence']:.0f} % "
        "interval]"
    ]
    for row in result["rows"]:
        interval = row["step_time_interval(s)"]
        ratio = row["ratio_interval"]
        shown = f"{row['step_time(s)']:.4f} s" + (
            f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else ""
        )
        relative = f"ratio to ZeRO-3 {row['ratio_to_zero3']:.3f}" + (
            f" [{ratio[0]:.3f}, {ratio[1]:.3f}]" if ratio else ""
        )
        lines.append(f"  {row['run']:<18} {shown:<34} {relative}")
    for a in result["loss_agreement"]:
        tolerance = "not judged" if a["tolerance"] is None else f"tolerance {a['tolerance']:.3g}"
        lines.append(
            f"  loss {a['peer']} vs {a['reference']}: max relative difference "
            f"{a['max_relative_difference']:.3g} "
            f"(first step {a['first_step_relative_difference']:.3g}), {tolerance}: {a['diagnosis']}"
        )
    return "\n".join(lines)
