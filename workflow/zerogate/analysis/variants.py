"""The variant comparison table: one row per ZeRO stage / offload variant trained on the same model and
data (zerogate.plan.variants renders them), each statistic from zerogate.analysis.measures, so the table
and a run's report mean the same thing by "median step time" (the per-rank median, then the slowest rank).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.measures import SpikeRule
from zerogate.plan.variants import VARIANTS


def variant_row(name: str, steps: pd.DataFrame, summary: dict[str, Any], *, warmup_steps: int,
                spike_rule: SpikeRule, expected_steps: int | None) -> dict[str, Any]:
    """One variant: its stage and offload, then measures.run_statistics of its step records."""
    stage, offload_optimizer, offload_param = VARIANTS[name]
    per_rank = {int(rank): int(step) for rank, step in steps.groupby("rank")["step"].max().items()}
    # A variant's summary exists only when its run finished; its launcher log is not parsed, so no failures.
    completion = measures.run_completion(per_rank, [], True, expected_steps, summary.get("world_size"))
    statistics = measures.run_statistics(steps, warmup_steps, spike_rule, completion)
    peaks = statistics.pop("peak_memory_per_rank(GiB)")
    return {
        "variant": name, "stage": stage, "offload_optimizer": offload_optimizer, "offload_param": offload_param,
        "median_step_time(s)": statistics["step_time_median(s)"],
        **{key: value for key, value in statistics.items() if key != "step_time_median(s)"},
        "peak_memory_per_rank(GiB)": [peaks[rank] for rank in sorted(peaks)],
        "steps": statistics["optimizer_steps"],
        "wall_time(s)": summary.get("wall_time(s)"),
    }


def compare(summaries: dict[str, dict[str, Any]], steps: dict[str, pd.DataFrame], *, warmup_steps: int,
            spike_rule: SpikeRule, expected_steps: int | None = None) -> list[dict[str, Any]]:
    """One row per variant (``steps``: each variant's step records of every rank, parse.read_rank_metrics)."""
    return [variant_row(name, frame, summaries[name], warmup_steps=warmup_steps, spike_rule=spike_rule,
                        expected_steps=expected_steps)
            for name, frame in steps.items()]
