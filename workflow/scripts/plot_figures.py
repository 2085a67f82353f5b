"""Entry point of the plot_figures rule (logic: zerogate.report.figures)."""
import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json
from zerogate.report.figures import (loss_figure, loss_scale_figure, loss_scale_series, memory_figure, no_loss_scale_figure,
                              step_time_figure)
from zerogate.analysis.parse import event_table

with logging_to(snakemake.log[0]):
    steps = pd.read_parquet(snakemake.input.steps)
    events = pd.read_parquet(snakemake.input.events)
    verdicts = read_json(snakemake.input.verdicts)
    warmup = int(steps.loc[steps["warmup"], "step"].max()) if steps["warmup"].any() else 0
    # The loss stabiliser's events came in with parse_logs (kind "stabiliser": step, rank, kind, value, action).
    loss_figure(steps, events, warmup, snakemake.output.loss, event_table(events, "stabiliser"))
    step_time_figure(steps, warmup, verdicts, snakemake.output.step_time)
    memory_figure(steps, verdicts, snakemake.output.memory)
    series = loss_scale_series(steps, events)
    if series is None:
        no_loss_scale_figure(snakemake.output.loss_scale)
    else:
        loss_scale_figure(series, snakemake.output.loss_scale)
