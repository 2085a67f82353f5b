"""Entry point of the bench_metrics_overhead rule (logic: zerogate.bench.metrics_overhead): table written and
printed."""

import sys
from pathlib import Path

from zerogate.bench.metrics_overhead import table, text
from zerogate.contracts.records import TrainSummary
from zerogate.entry import logging_to
from zerogate.io import write_json

with logging_to(snakemake.log[0]) as log:
    result = table(
        [TrainSummary.read(p) for p in snakemake.input.on],
        [TrainSummary.read(p) for p in snakemake.input.off],
    )
    lines = text(result, snakemake.params.profile_name, snakemake.params.steps)
    write_json(snakemake.output.data, result)
    Path(snakemake.output.table).write_text(lines + "\n")
    log.info("\n%s", lines)
    print(lines, file=sys.__stderr__)
