"""Entry point of the compare_variants rule (logic: zerogate.analysis.variants)."""

from zerogate.analysis.intervals import IntervalRule
from zerogate.analysis.loss_trend import SpikeRule
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import VariantRun, compare
from zerogate.config.settings import IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.plan import PeakPrediction
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import RunSpec, TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    spec = RunSpec.read(inputs.run_spec)  # the run spec every variant trained with
    runs = {
        name: VariantRun(read_rank_metrics(metrics), TrainSummary.read(summary))
        for name, summary, metrics in zip(params.variants, inputs.summaries, inputs.metrics)
    }
    table = compare(
        runs,
        warmup_steps=params.warmup_steps,
        spike_rule=SpikeRule.from_settings(TrainSettings.read(inputs.settings).stabiliser),
        expected_steps=spec.training.optimizer_steps,
        interval_rule=IntervalRule.from_settings(typed(IntervalSettings, params.intervals)),
        predictions={name: PeakPrediction.read(path) for name, path in zip(params.predicted, inputs.peaks)},
        communication=CommsVolume.read(inputs.communication),
        accumulation=spec.training.gradient_accumulation_steps,
        not_run=params.not_run,
        accelerator=spec.accelerator,
    )
    table.write(snakemake.output.table)
    for row in table.rows:
        log.info("%s", row)
    log.info("fastest: %s, smallest: %s", table.fastest, table.smallest)
    for agreement in table.agreement:
        log.info("%s", agreement)
