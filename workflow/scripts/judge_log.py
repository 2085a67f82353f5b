"""Entry point of the judge_log rule (logic: zerogate.analysis.log_gates.judge_log_file, page and console
text: zerogate.report.log_page). Every log is judged before anything is written: a bad one stops the rule
with one line naming it and leaves no summary behind. Each log's verdicts are printed on the console."""

import sys
from pathlib import Path

from zerogate.analysis.log_gates import judge_log_file
from zerogate.config.judging import GateSettings
from zerogate.contracts.base import typed
from zerogate.contracts.log_summary import LogSummary
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.report.log_page import log_verdicts_text, render_log_page

with logging_to(snakemake.log[0]) as log:
    params = snakemake.params
    gates = typed(tuple[GateSettings, ...], params.gates)
    try:
        judged = [
            judge_log_file(path, name, gates, params.warmup_steps)
            for name, path in zip(params.names, snakemake.input.logs)
        ]
    except InputError as error:
        fail(str(error))
    for summary, summary_path, page_path in zip(judged, snakemake.output.summaries, snakemake.output.pages):
        summary.write(summary_path)
        Path(page_path).write_text(render_log_page(LogSummary.read(summary_path), params.profile))
        log.info(
            "%s: %d gates (%s), failed ranks %s, %d skipped steps",
            summary.log,
            len(summary.gates),
            ", ".join(f"{g.name} {g.verdict}" for g in summary.gates),
            summary.failed_ranks,
            summary.skipped_steps,
        )
        # The verdicts on the console too (the log file above is the rule's own record).
        print(log_verdicts_text(summary, summary_path), file=sys.__stderr__)
