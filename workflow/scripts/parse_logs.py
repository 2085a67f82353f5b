"""Entry point of the parse_logs rule (logic: zerogate.parse)."""
from pathlib import Path

from zerogate.entry import logging_to, read_json, write_json
from zerogate.parse import parse_launcher_log, read_rank_metrics, run_metadata

with logging_to(snakemake.log[0]) as log:
    steps = read_rank_metrics(snakemake.input.metrics)
    log_text = Path(snakemake.input.launcher_log).read_text(errors="replace")
    events = parse_launcher_log(log_text)
    meta = run_metadata(steps, events, read_json(snakemake.input.summary), log_text, snakemake.params.expected_steps)
    steps.to_parquet(snakemake.output.steps, index=False)
    events.to_parquet(snakemake.output.events, index=False)
    write_json(snakemake.output.run_meta, meta)
    log.info("%d step rows over %d ranks, %d launcher events, failed ranks %s", len(steps),
             steps["rank"].nunique(), len(events), meta["failed_ranks"])
