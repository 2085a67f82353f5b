"""Entry point of the summarise_variant rule (logic: zerogate.analysis.summary.summarise, on one variant's
records as its training run wrote them)."""

from zerogate.analysis.health import finished_run_completion
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.summary import AnalysisSettings, RunRecords, summarise
from zerogate.config.judging import IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import RunSpec, TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    spec = RunSpec.read(inputs.run_spec)  # the run spec every variant trained with
    trained = TrainSummary.read(inputs.summary)  # written only when the run finished
    steps = read_rank_metrics(inputs.metrics)
    records = RunRecords(
        tables=[steps],
        completions=[finished_run_completion(steps, spec.training.optimizer_steps, trained.world_size)],
        world_size=spec.world_size,
        expected_steps=spec.training.optimizer_steps,
        finished_world_size=trained.world_size,
    )
    settings = AnalysisSettings.of(
        params.warmup_steps,
        typed(IntervalSettings, params.intervals),
        TrainSettings.read(inputs.settings).stabiliser,
    )
    summary = summarise(records, settings)
    summary.write(snakemake.output.summary)
    log.info("%s: %s", snakemake.wildcards.variant, summary.statistics)
