"""Entry point of the write_report rule (logic: zerogate.report.html)."""

from pathlib import Path

from zerogate.analysis.evidence import load_evidence
from zerogate.entry import logging_to
from zerogate.report.figures import loss_scale_series
from zerogate.report.html import ReportFigures, render_html

with logging_to(snakemake.log[0]):
    inputs = snakemake.input
    run = load_evidence(dict(inputs.items()))
    shown = {k: inputs[k] for k in ("loss", "step_time", "memory")}
    if loss_scale_series(run.steps, run.events) is not None:  # a run without a loss scaler: no such figure
        shown["loss_scale"] = inputs.loss_scale
    figures = ReportFigures(
        run=shown,
        ranks=inputs.ranks,
        # the choices section: the profile's variants side by side (only when it lists variants)
        variants=inputs.variants_figure[0] if inputs.variants_figure else None,
    )
    Path(snakemake.output.html).write_text(render_html(run, figures))
