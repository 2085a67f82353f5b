"""Entry point of the compare_variants rule (logic: zerogate.analysis.variants)."""
from zerogate.analysis.measures import SpikeRule
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import compare
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    names = snakemake.params.variants
    summaries = {name: TrainSummary.read(path) for name, path in zip(names, snakemake.input.summaries)}
    steps = {name: read_rank_metrics(path) for name, path in zip(names, snakemake.input.metrics)}
    table = compare(summaries, steps, warmup_steps=snakemake.params.warmup_steps,
                    spike_rule=SpikeRule.from_settings(TrainSettings.read(snakemake.input.settings).stabiliser),
                    expected_steps=snakemake.params.expected_steps)
    table.write(snakemake.output.table)
    for row in table.rows:
        log.info("%s", row)
