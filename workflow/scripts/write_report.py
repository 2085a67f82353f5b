"""Entry point of the write_report rule (logic: zerogate.report.html)."""

from pathlib import Path

from zerogate.analysis.intervals import IntervalRule
from zerogate.analysis.loss_trend import SpikeRule
from zerogate.analysis.parse import event_table, read_events, read_steps
from zerogate.config.settings import IntervalSettings
from zerogate.contracts.base import read_lines, typed
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import EvalRecord
from zerogate.contracts.report import Provenance, VariantsTable
from zerogate.contracts.run import Deviations, TrainSettings
from zerogate.contracts.verdicts import ClaimVerdicts, GateVerdicts
from zerogate.entry import logging_to
from zerogate.report.figures import loss_scale_series
from zerogate.report.html import render_html

with logging_to(snakemake.log[0]):
    inputs = snakemake.input
    steps, events = read_steps(inputs.steps), read_events(inputs.events)
    figures = {k: inputs[k] for k in ("loss", "step_time", "memory")}
    if loss_scale_series(steps, events) is not None:
        figures["loss_scale"] = inputs.loss_scale
    page = render_html(
        verdicts=GateVerdicts.read(inputs.verdicts),
        steps=steps,
        provenance=Provenance.read(inputs.provenance),
        deviations=Deviations.read(inputs.deviations),
        figures=figures,
        warmup_steps=snakemake.params.warmup_steps,  # the profile's training.warmup_steps_excluded
        spike_rule=SpikeRule.from_settings(TrainSettings.read(inputs.settings).stabiliser),
        run_meta=RunMeta.read(inputs.run_meta),
        ledger=LedgerTable.read(inputs.ledger),
        evaluation=read_lines(EvalRecord, inputs.evaluation),
        timers=event_table(events, "wall_clock"),
        claims=ClaimVerdicts.read(inputs.claims),
        plan=Plan.read(inputs.plan),
        claimed_plan=Plan.read(inputs.claimed_plan),
        ranks_figure=inputs.ranks,
        communication=CommsVolume.read(inputs.communication),
        interval_rule=IntervalRule.from_settings(typed(IntervalSettings, snakemake.params.intervals)),
        repeat_steps=[read_steps(path) for path in inputs.repeat_steps],
        repeat_run_metas=[RunMeta.read(path) for path in inputs.repeat_run_meta],
        # The choices section: the profile's variants side by side (only when it lists variants).
        variants=VariantsTable.read(inputs.variants[0]) if inputs.variants else None,
        variants_figure=inputs.variants_figure[0] if inputs.variants_figure else None,
    )
    Path(snakemake.output.html).write_text(page)
