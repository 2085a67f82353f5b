"""The profile's sections that judge a run: ``gates`` (a claim, the metric and statistic that test it, the
threshold) and ``intervals`` (how the timing statistics' uncertainty is estimated). Analysis settings:
editing them re-judges a run, never retrains it."""

from __future__ import annotations

from typing import Literal

from zerogate.config.base import Int, Number, Settings, Str, require, setting, when


class ConvergenceRuleSettings(Settings):
    """A loss_convergence gate's ``convergence`` block (zerogate.analysis.loss_trend.loss_convergence)."""

    initial_steps: Int = setting("the initial loss is the median of this many first steps", ge=1)
    final_fraction: Number = setting(
        "the final loss: mean of this last share of the steps (one block)", gt=0, le=0.5
    )
    max_rebound: Number = setting("largest (final - lowest block mean) / (initial - lowest block mean)", ge=0)
    min_drop_sigmas: Number = setting("smallest (initial - final) / robust sd of the last block", ge=0)


GateStatistic = Literal[
    "median",
    "p90",
    "max",
    "loss_convergence",
    "nonfinite_count",
    "overflow_skip_fraction",
    "floor_ratio",
    "failed_ranks",
]


class GateSettings(Settings):
    """One of the profile's ``gates``: a claim, the metric and statistic that test it, and the threshold."""

    FILE_RULES = (require(when({"statistic": "loss_convergence"}), ["convergence"]),)

    name: Str = setting("snake_case name", pattern=r"^[a-z0-9_]+$")
    claim: Str = setting("the claim's words")
    definition: Str = setting("what exactly is measured, in words")
    metric: Str = setting("the step-record key (with its unit), or the quantity the statistic reads")
    statistic: GateStatistic = setting(
        "how the metric becomes one number: median/p90 (after warm-up, overflow-skipped steps excluded) and "
        "max: per rank, then the worst rank; loss_convergence: final/initial loss with the drop and rebound "
        "tests of the gate's convergence block; nonfinite_count: faults, one per optimizer step, and a fatal "
        "loss-scale abort; overflow_skip_fraction: fp16-skipped steps / steps; floor_ratio: median step "
        "time / the planner's physical floor; failed_ranks: ranks that crashed or stopped early"
    )
    comparison: Literal["<", "<=", "==", ">=", ">"] = setting("measured <comparison> threshold passes")
    threshold: Number = setting("the claim's number, in ``unit``")
    unit: Literal["s", "GB", "GiB", "ratio", "count"] = setting(
        "the threshold's unit (GB = 10^9 bytes, GiB = 2^30)"
    )
    ranks: Literal["smallest_device", "all"] = setting(
        "memory gates: the ranks on the device with the least memory, or all", "smallest_device"
    )
    convergence: ConvergenceRuleSettings | None = setting("loss_convergence only: its rule", None)


class IntervalSettings(Settings):
    """``intervals``: how the timing statistics' uncertainty is estimated: a stationary block bootstrap
    over the timed steps (zerogate.analysis.measures, "Intervals"). An analysis setting: editing it
    re-judges, never retrains."""

    confidence: Number = setting(
        "coverage of every timing interval (0.95: a 95 % interval)",
        0.95,
        filled=True,
        gt=0,
        lt=1,
        refused="is not a coverage between 0 and 1 (0.95 for a 95 % interval)",
    )
    resamples: Int = setting(
        "bootstrap resamples per interval",
        2000,
        filled=True,
        ge=100,
        refused="resamples cannot place a percentile interval's ends (at least 100)",
    )
    seed: Int = setting(
        "seed of the bootstrap: the same records and settings give the same intervals", 0, filled=True
    )
