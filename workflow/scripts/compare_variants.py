"""Entry point of the compare_variants rule (logic: zerogate.analysis.variants)."""
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.analysis.measures import SpikeRule
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import compare

with logging_to(snakemake.log[0]) as log:
    names = snakemake.params.variants
    summaries = {name: read_json(path) for name, path in zip(names, snakemake.input.summaries)}
    steps = {name: read_rank_metrics(path) for name, path in zip(names, snakemake.input.metrics)}
    rows = compare(summaries, steps, warmup_steps=snakemake.params.warmup_steps,
                   spike_rule=SpikeRule.from_settings(snakemake.params.stabiliser),
                   expected_steps=snakemake.params.expected_steps)
    write_json(snakemake.output.table, rows)
    for row in rows:
        log.info("%s", row)
