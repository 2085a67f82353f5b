"""Entry point of the bench_ddp_vs_zero3 rule (logic: zerogate.bench.ddp_vs_zero3): table written and
printed."""

import sys
from pathlib import Path

from zerogate.bench.ddp_vs_zero3 import ROWS, table, text
from zerogate.entry import logging_to
from zerogate.io import write_json

with logging_to(snakemake.log[0]) as log:
    runs = {row: list(snakemake.input[row.replace("-", "_")]) for row in ROWS}
    result = table(runs, snakemake.params.warmup_steps)
    lines = text(result, snakemake.params.profile_name, snakemake.params.steps)
    write_json(snakemake.output.data, result)
    Path(snakemake.output.table).write_text(lines + "\n")
    log.info("\n%s", lines)
    print(lines, file=sys.__stderr__)
