"""Entry point of the parse_logs rule (logic: zerogate.analysis.parse)."""
from pathlib import Path

import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.train.nodes import node_logs
from zerogate.analysis.parse import parse_launcher_log, read_rank_metrics, run_metadata, stabiliser_events

with logging_to(snakemake.log[0]) as log:
    steps = read_rank_metrics(snakemake.input.metrics)
    # Node 0's launcher log and, on several nodes, the others' beside it (zerogate.train.nodes.node_log).
    log_text = "\n".join(path.read_text(errors="replace") for path in node_logs(Path(snakemake.input.launcher_log)))
    launcher_events = parse_launcher_log(log_text)
    meta = run_metadata(steps, launcher_events, read_json(snakemake.input.summary), log_text, snakemake.params.expected_steps)
    stabiliser = stabiliser_events(snakemake.input.stabiliser_events)
    events = pd.concat([launcher_events, stabiliser], ignore_index=True) if len(stabiliser) else launcher_events
    steps.to_parquet(snakemake.output.steps, index=False)
    events.to_parquet(snakemake.output.events, index=False)
    write_json(snakemake.output.run_meta, meta)
    log.info("%d step rows over %d ranks, %d launcher events, %d stabiliser events, failed ranks %s", len(steps),
             steps["rank"].nunique(), len(launcher_events), len(stabiliser), meta["failed_ranks"])
