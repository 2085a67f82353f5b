"""Entry point of the plot_figures rule (logic: zerogate.report.figures)."""
import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json
from zerogate.analysis.measures import SpikeRule
from zerogate.analysis.parse import event_table
from zerogate.report.figures import (loss_figure, loss_scale_figure, loss_scale_series, memory_figure, no_loss_scale_figure,
                                     ranks_figure, step_time_figure)

with logging_to(snakemake.log[0]) as log:
    steps = pd.read_parquet(snakemake.input.steps)
    events = pd.read_parquet(snakemake.input.events)
    verdicts = read_json(snakemake.input.verdicts)
    warmup = snakemake.params.warmup_steps  # the profile's training.warmup_steps_excluded (analysis only)
    # The loss stabiliser's events came in with parse_logs (kind "stabiliser": step, rank, kind, value, action).
    shown = loss_figure(steps, events, warmup, snakemake.output.loss, SpikeRule.from_settings(snakemake.params.stabiliser),
                        event_table(events, "stabiliser"))
    shown |= step_time_figure(steps, warmup, verdicts, snakemake.output.step_time)
    shown |= memory_figure(steps, verdicts, snakemake.output.memory)
    shown |= ranks_figure(steps, warmup, snakemake.output.ranks, read_json(snakemake.input.run_meta).get("world_size"))
    series = loss_scale_series(steps, events)
    if series is None:
        no_loss_scale_figure(snakemake.output.loss_scale)
    else:
        loss_scale_figure(series, snakemake.output.loss_scale)
    log.info("figures show %s", shown)
