"""Entry point of the check_gates rule (logic: zerogate.analysis.gates)."""

from zerogate.analysis.gates import evaluate
from zerogate.analysis.intervals import IntervalRule
from zerogate.analysis.loss_trend import SpikeRule
from zerogate.analysis.parse import read_events, read_steps
from zerogate.config.settings import GateSettings, IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import Deviations, DsConfig, RunSpec, TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    verdicts = evaluate(
        typed(tuple[GateSettings, ...], snakemake.params.gates),
        read_steps(inputs.steps),
        read_events(inputs.events),
        TrainSummary.read(inputs.summary),
        RunSpec.read(inputs.run_spec),
        Deviations.read(inputs.deviations),
        Fingerprint.read(inputs.fingerprint),
        snakemake.params.warmup_steps,
        SpikeRule.from_settings(TrainSettings.read(inputs.settings).stabiliser),
        plan=Plan.read(inputs.plan),
        run_meta=RunMeta.read(inputs.run_meta),
        ds_config=DsConfig.read(inputs.ds_config),
        interval_rule=IntervalRule.from_settings(typed(IntervalSettings, snakemake.params.intervals)),
        repeat_steps=[read_steps(path) for path in inputs.repeat_steps],
    )
    verdicts.write(snakemake.output.verdicts)
    for gate in verdicts.gates:
        shown = "" if gate.interval is None else f" [{gate.interval.low:.4g}, {gate.interval.high:.4g}]"
        log.info("%s: %s (measured %s%s %s)", gate.name, gate.verdict, gate.measured, shown, gate.unit)
