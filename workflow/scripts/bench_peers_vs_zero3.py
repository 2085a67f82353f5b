"""Entry point of the bench_peers_vs_zero3 rule (logic: zerogate.bench.peers_vs_zero3): table written and
printed."""

import sys
from pathlib import Path

from zerogate.bench.peers_vs_zero3 import ROWS, table, text
from zerogate.config.judging import IntervalSettings
from zerogate.contracts.base import typed
from zerogate.contracts.summary import IntervalRule
from zerogate.entry import logging_to
from zerogate.io import write_json

with logging_to(snakemake.log[0]) as log:
    params = snakemake.params
    result = table(
        dict(zip(ROWS, snakemake.input.metrics)),  # each run finished: its summary is an input too
        params.warmup_steps,
        IntervalRule.from_settings(typed(IntervalSettings, params.intervals)),
    )
    lines = text(result, params.profile_name, params.steps)
    write_json(snakemake.output.data, result)
    Path(snakemake.output.table).write_text(lines + "\n")
    log.info("\n%s", lines)
    print(lines, file=sys.__stderr__)
