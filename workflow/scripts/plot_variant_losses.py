"""Entry point of the plot_variant_losses rule (logic: zerogate.report.figures.variant_loss_figure)."""

from zerogate.analysis.parse import read_rank_metrics
from zerogate.entry import logging_to
from zerogate.report.figures import variant_loss_figure

with logging_to(snakemake.log[0]) as log:
    curves = {
        name: read_rank_metrics(path)
        for name, path in zip(snakemake.params.variants, snakemake.input.metrics)
    }
    log.info("figure shows %s", variant_loss_figure(curves, snakemake.output.loss))
