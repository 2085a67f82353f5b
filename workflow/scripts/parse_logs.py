"""Entry point of the parse_logs rule (logic: zerogate.parse)."""
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.parse import parse_launcher_log, read_rank_metrics

with logging_to(snakemake.log[0]) as log:
    steps = read_rank_metrics(snakemake.input.metrics)
    events = parse_launcher_log(Path(snakemake.input.launcher_log).read_text(errors="replace"))
    steps.to_parquet(snakemake.output.steps, index=False)
    events.to_parquet(snakemake.output.events, index=False)
    log.info("%d step rows over %d ranks, %d launcher events", len(steps), steps["rank"].nunique(), len(events))
