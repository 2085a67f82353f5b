"""Entry point of the register_run rule (logic: zerogate.report.registry)."""

from zerogate.analysis.intervals import IntervalRule
from zerogate.analysis.loss_trend import SpikeRule
from zerogate.analysis.parse import read_steps
from zerogate.config.settings import IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.report import Provenance
from zerogate.contracts.run import Deviations, TrainSettings
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.entry import logging_to
from zerogate.report.registry import registry_record

with logging_to(snakemake.log[0]):
    inputs = snakemake.input
    registry_record(
        machine=snakemake.params.machine,
        verdicts=GateVerdicts.read(inputs.verdicts),
        steps=read_steps(inputs.steps),
        run_meta=RunMeta.read(inputs.run_meta),
        provenance=Provenance.read(inputs.provenance),
        deviations=Deviations.read(inputs.deviations),
        files={
            "report": inputs.report,
            "verdicts": inputs.verdicts,
            "steps": inputs.steps,
            "events": inputs.events,
            "provenance": inputs.provenance,
            "figures": {k: inputs[k] for k in ("loss", "step_time", "memory", "loss_scale")},
            "repeat_steps": list(inputs.repeat_steps),
        },
        warmup_steps=snakemake.params.warmup_steps,
        spike_rule=SpikeRule.from_settings(TrainSettings.read(inputs.settings).stabiliser),
        interval_rule=IntervalRule.from_settings(typed(IntervalSettings, snakemake.params.intervals)),
        repeat_steps=[read_steps(path) for path in inputs.repeat_steps],
        repeat_run_metas=[RunMeta.read(path) for path in inputs.repeat_run_meta],
    ).write(snakemake.output.registry)
