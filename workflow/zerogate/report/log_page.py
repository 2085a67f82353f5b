"""The judge_log rule's page: one launcher log's gates and counts (a LogSummary), self-contained HTML in the
main report's style (templates/log_summary.html.j2 extends its base template and style sheet)."""

from __future__ import annotations

from zerogate import __version__
from zerogate.contracts.log_summary import LogGate, LogSummary, RankFailure
from zerogate.contracts.verdicts import GATE_OUTCOMES, NOT_MEASURED
from zerogate.report.html import environment

# LogSummary field -> the label the page gives it.
COUNT_LABELS = {
    "deepspeed_version": "DeepSpeed version (its 'DeepSpeed info' line)",
    "precision": "precision (DeepSpeed's config print or overflow lines)",
    "world_size": "world size (launcher or NCCL)",
    "optimizer_steps": "highest optimizer step a line names",
    "skipped_steps": "optimizer steps fp16 skipped (once per step, not per rank or line)",
    "hysteresis_skips": "of those, hysteresis skips (scale kept)",
    "progress_skipped": "DeepSpeed's own skipped= at its last progress line",
    "last_loss_scale": "last loss scale",
    "progress_lines": "DeepSpeed progress lines",
    "throughput_lines": "throughput lines (timer and pipeline engine)",
    "wall_clock_lines": "DeepSpeed wall-clock breakdown lines",
    "memory_lines": "DeepSpeed memory lines",
    "tracebacks": "Python tracebacks",
    "fatal_loss_scale": "fatal loss-scale aborts",
    "nccl_timeouts": "NCCL watchdog timeouts",
    "failed_ranks": "ranks that failed",
}


FAILURES_LABEL = "how each failed rank failed (the lines that show it)"


def failures_row(summary: LogSummary) -> str:
    """``rank 0: exit, traceback (lines 3, 11); no rank named: exit (line 12)``, or an empty string."""

    def one(failure: RankFailure) -> str:
        who = "no rank named" if failure.rank is None else f"rank {failure.rank}"
        lines = [str(line.line) for line in failure.lines if line.line is not None]
        where = f" (line{'s' if len(lines) > 1 else ''} {', '.join(lines)})" if lines else ""
        return f"{who}: {', '.join(failure.causes)}{where}"

    return "; ".join(one(failure) for failure in summary.failures)


def render_log_page(summary: LogSummary, profile: str) -> str:
    """The page of one judged log; ``profile`` names the profile whose gates it was judged against."""
    counts = {verdict: sum(g.verdict == verdict for g in summary.gates) for verdict in GATE_OUTCOMES}
    rows = {label: getattr(summary, field) for field, label in COUNT_LABELS.items()}
    if summary.failures:
        rows[FAILURES_LABEL] = failures_row(summary)
    return (
        environment()
        .get_template("log_summary.html.j2")
        .render(
            title=f"zerogate log judgement — {summary.name}",
            summary=summary,
            counts=counts,
            rows=rows,
            profile=profile,
            version=__version__,
        )
    )


def _gate_line(gate: LogGate, width: int) -> str:
    """``  FAIL  ranks_completed: 2 count, needs == 0``: a judged gate, its value against its threshold."""
    value = "no value" if gate.measured is None else f"{gate.measured:g} {gate.unit}"
    return f"  {gate.verdict:<{width}}  {gate.name}: {value}, needs {gate.comparison} {gate.threshold:g}"


def log_verdicts_text(summary: LogSummary, summary_path: str) -> str:
    """What judge_log prints on the console for one log: the verdicts counted, each judged gate's verdict
    and value (the profile's order), the gates the log cannot judge by name (their reasons are in
    ``summary_path`` and the page), and the failed ranks with how each failed."""
    counts = [f"{n} {v}" for v in GATE_OUTCOMES if (n := sum(g.verdict == v for g in summary.gates))]
    lines = [f"{summary.log}: {', '.join(counts) or 'no'} of {len(summary.gates)} gates ({summary_path})"]
    judged = [g for g in summary.gates if g.verdict != NOT_MEASURED]
    width = max((len(g.verdict) for g in judged), default=0)
    lines += [_gate_line(gate, width) for gate in judged]
    unjudged = [g.name for g in summary.gates if g.verdict == NOT_MEASURED]
    if unjudged:
        lines.append(f"  {NOT_MEASURED}: {', '.join(unjudged)} (why: the summary and its page)")
    ranks = ", ".join(map(str, summary.failed_ranks)) or "none the log shows"
    how = f" ({failures_row(summary)})" if summary.failures else ""
    lines.append(f"  failed ranks: {ranks}{how}")
    return "\n".join(lines)
