"""Entry point of the compare_variants rule (logic: zerogate.plan.variants)."""
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.analysis.parse import read_rank_metrics
from zerogate.plan.variants import compare

with logging_to(snakemake.log[0]) as log:
    names = snakemake.params.variants
    summaries = {name: read_json(path) for name, path in zip(names, snakemake.input.summaries)}
    steps = {name: read_rank_metrics(Path(path).parent / "metrics").to_dict("records")
             for name, path in zip(names, snakemake.input.summaries)}
    rows = compare(summaries, steps)
    write_json(snakemake.output.table, rows)
    for row in rows:
        log.info("%s", row)
