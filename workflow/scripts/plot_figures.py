"""Entry point of the plot_figures rule (logic: zerogate.report.figures)."""

from zerogate.analysis.parse import event_table, read_events, read_steps
from zerogate.contracts.summary import RunSummary
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.entry import logging_to
from zerogate.report.figures import (
    loss_figure,
    loss_scale_figure,
    loss_scale_series,
    memory_figure,
    no_loss_scale_figure,
    ranks_figure,
    step_time_figure,
)

with logging_to(snakemake.log[0]) as log:
    inputs, output = snakemake.input, snakemake.output
    steps, events = read_steps(inputs.steps), read_events(inputs.events)
    verdicts = GateVerdicts.read(inputs.verdicts)
    summary = RunSummary.read(inputs.run_summary)  # the statistics a figure marks, computed once
    # The loss stabiliser's events came in with parse_logs (kind "stabiliser": step, rank, kind, value,
    # action).
    shown = loss_figure(steps, events, summary, output.loss, event_table(events, "stabiliser"))
    shown |= step_time_figure(steps, summary, verdicts, output.step_time)
    shown |= memory_figure(steps, summary, verdicts, output.memory)
    shown |= ranks_figure(steps, summary, output.ranks)
    series = loss_scale_series(steps, events)
    if series is None:
        no_loss_scale_figure(output.loss_scale)
    else:
        loss_scale_figure(series, output.loss_scale)
    log.info("figures show %s", shown)
