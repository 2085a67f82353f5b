"""The variant comparison table: one row per ZeRO stage / offload variant trained on the same model and
data (zerogate.plan.variants renders them), each statistic from zerogate.analysis.measures, so the table
and a run's report mean the same thing by "median step time" (the per-rank median, then the slowest rank).
"""

from __future__ import annotations

import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.measures import SpikeRule
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.report import VariantRow, VariantsTable
from zerogate.plan.variants import VARIANTS


def variant_row(name: str, steps: pd.DataFrame, summary: TrainSummary, *, warmup_steps: int,
                spike_rule: SpikeRule, expected_steps: int | None) -> VariantRow:
    """One variant: its stage and offload, then measures.run_statistics of its step records."""
    stage, offload_optimizer, offload_param = VARIANTS[name]
    per_rank = {int(rank): int(step) for rank, step in steps.groupby("rank")["step"].max().items()}
    # A variant's summary exists only when its run finished; its launcher log is not parsed, so no failures.
    completion = measures.run_completion(per_rank, [], True, expected_steps, summary.world_size)
    return VariantRow(variant=name, stage=stage, offload_optimizer=offload_optimizer, offload_param=offload_param,
                      statistics=measures.run_statistics(steps, warmup_steps, spike_rule, completion),
                      wall_time_s=summary.wall_time_s)


def compare(summaries: dict[str, TrainSummary], steps: dict[str, pd.DataFrame], *, warmup_steps: int,
            spike_rule: SpikeRule, expected_steps: int | None = None) -> VariantsTable:
    """One row per variant (``steps``: each variant's step records of every rank, parse.read_rank_metrics)."""
    return VariantsTable(rows=[variant_row(name, frame, summaries[name], warmup_steps=warmup_steps, spike_rule=spike_rule,
                                           expected_steps=expected_steps)
                               for name, frame in steps.items()])
