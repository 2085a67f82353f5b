"""Entry point of the write_report rule (logic: zerogate.report.html)."""
import json
from pathlib import Path

import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json
from zerogate.analysis.measures import SpikeRule
from zerogate.analysis.parse import event_table
from zerogate.report.figures import loss_scale_series
from zerogate.report.html import render_html

with logging_to(snakemake.log[0]):
    steps = pd.read_parquet(snakemake.input.steps)
    events = pd.read_parquet(snakemake.input.events)
    figures = {k: snakemake.input[k] for k in ("loss", "step_time", "memory")}
    if loss_scale_series(steps, events) is not None:
        figures["loss_scale"] = snakemake.input.loss_scale
    page = render_html(
        verdicts=read_json(snakemake.input.verdicts),
        steps=steps,
        provenance=read_json(snakemake.input.provenance),
        deviations=read_json(snakemake.input.deviations),
        figures=figures,
        warmup_steps=snakemake.params.warmup_steps,  # the profile's training.warmup_steps_excluded
        spike_rule=SpikeRule.from_settings(snakemake.params.stabiliser),
        run_meta=read_json(snakemake.input.run_meta),
        ledger=read_json(snakemake.input.ledger),
        evaluation=[json.loads(line) for line in Path(snakemake.input.evaluation).read_text().splitlines() if line],
        timers=event_table(events, "wall_clock"),
        claims=read_json(snakemake.input.claims),
        plan=read_json(snakemake.input.plan),
        claimed_plan=read_json(snakemake.input.claimed_plan),
        ranks_figure=snakemake.input.ranks,
        communication=read_json(snakemake.input.communication),
    )
    Path(snakemake.output.html).write_text(page)
