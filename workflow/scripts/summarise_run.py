"""Entry point of the summarise_run rule (logic: zerogate.analysis.summary.summarise)."""

from zerogate.analysis.health import completion_of
from zerogate.analysis.parse import read_events, read_steps
from zerogate.analysis.summary import AnalysisSettings, RunRecords, summarise
from zerogate.config.judging import IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.run import RunSpec, TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    spec = RunSpec.read(inputs.run_spec)  # what the records are counted against
    metas = [RunMeta.read(inputs.run_meta), *[RunMeta.read(path) for path in inputs.repeat_run_meta]]
    records = RunRecords(
        tables=[read_steps(inputs.steps), *[read_steps(path) for path in inputs.repeat_steps]],
        completions=[completion_of(meta) for meta in metas],
        world_size=spec.world_size,
        expected_steps=spec.training.optimizer_steps,
        finished_world_size=metas[0].world_size,
        events=read_events(inputs.events),
    )
    settings = AnalysisSettings.of(
        params.warmup_steps,  # the profile's training.warmup_steps_excluded (analysis only)
        typed(IntervalSettings, params.intervals),
        TrainSettings.read(inputs.settings).stabiliser,  # the spike rule the run was stabilised by
    )
    summary = summarise(records, settings)
    summary.write(snakemake.output.summary)
    log.info("run statistics (%d repeat(s) pooled): %s", len(records.tables), summary.statistics)
