"""Entry point of the parse_logs rule (logic: zerogate.analysis.parse)."""

from pathlib import Path

from zerogate.analysis.parse import parse_run
from zerogate.contracts.records import TrainSummary
from zerogate.entry import logging_to
from zerogate.runtime.nodes import node_logs

with logging_to(snakemake.log[0]) as log:
    # Node 0's launcher log and, on several nodes, the others' beside it (zerogate.runtime.nodes.node_log).
    steps, events, meta = parse_run(
        snakemake.input.metrics,
        node_logs(Path(snakemake.input.launcher_log)),
        TrainSummary.read(snakemake.input.summary),
        snakemake.input.stabiliser_events,
        snakemake.params.expected_steps,
    )
    steps.to_parquet(snakemake.output.steps, index=False)
    events.to_parquet(snakemake.output.events, index=False)
    meta.write(snakemake.output.run_meta)
    log.info(
        "%d step rows over %d ranks, %d events, failed ranks %s",
        len(steps),
        steps["rank"].nunique(),
        len(events),
        meta.failed_ranks,
    )
