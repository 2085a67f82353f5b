"""Turn the run's raw output into tidy tables: zerogate's per-rank JSON lines and the launcher's log.

Three tables come out of a run:

- steps: one row per (rank, optimizer step), from ``train/metrics/rank<N>.jsonl``;
- events: one row per notable launcher-log line (DeepSpeed progress, throughput, wall-clock breakdown,
  memory, fp16 overflow and loss-scale changes, fatal errors, tracebacks, rank exits), with its numbers
  in ``detail`` (a JSON object), and one per loss-stabiliser event from ``train/events.jsonl`` (kind
  ``stabiliser``; :func:`stabiliser_events`);
- run metadata (:func:`run_metadata`): world size, per-rank completion and failures with their last lines.

DeepSpeed's log formats vary between releases (docs/reference.md section 3): the launcher log's formats
live in zerogate.analysis.launcher_log, this module builds the tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from zerogate.analysis import launcher_log
from zerogate.analysis.failure_attribution import attribute_events
from zerogate.contracts.base import ContractError, read_lines
from zerogate.contracts.machine import NodeFingerprint
from zerogate.contracts.parsed import EVENT_COLUMNS, Failure, ProgressSkips, RunMeta, missing_columns
from zerogate.contracts.records import StabiliserEvent, StepRecord, TrainSummary

STEP_COLUMNS = tuple(StepRecord.key(name) for name in StepRecord.model_fields)


def steps_table(records: list[StepRecord]) -> pd.DataFrame:
    """Step records as the ``steps`` table: one row per (rank, step), sorted, one column per StepRecord key
    (every column present, even with no value at any step)."""
    rows = [record.as_json() for record in records]
    frame = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    return frame.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def read_rank_metrics(metrics_dir: str | Path) -> pd.DataFrame:
    """All ranks' step records (``rank<N>.jsonl``, zerogate.contracts.records.StepRecord), as the ``steps``
    table every statistic in zerogate.analysis.measures reads (fp16 skips from its ``skip_reason`` column,
    nothing derived here)."""
    return steps_table(
        [
            record
            for path in sorted(Path(metrics_dir).glob("rank*.jsonl"))
            for record in read_lines(StepRecord, path)
        ]
    )


def read_steps(path: str | Path) -> pd.DataFrame:
    """parse_logs' steps table (``parsed/steps.parquet``), its columns checked against the StepRecord."""
    frame = pd.read_parquet(path)
    missing = missing_columns(frame.columns, STEP_COLUMNS)
    if missing:
        raise ContractError(
            str(path), missing[0], "column missing (written by another zerogate version? rerun parse_logs)"
        )
    return frame


def read_events(path: str | Path) -> pd.DataFrame:
    """parse_logs' events table (``parsed/events.parquet``), its columns checked."""
    frame = pd.read_parquet(path)
    missing = missing_columns(frame.columns, EVENT_COLUMNS)
    if missing:
        raise ContractError(str(path), missing[0], "column missing (rerun parse_logs)")
    return frame


def parse_launcher_log(text: str) -> pd.DataFrame:
    """Events from the launcher's combined output (zerogate.analysis.launcher_log knows the formats):
    DeepSpeed progress, throughput and wall-clock lines, memory lines, fp16 overflows and loss-scale
    changes (one ``overflow_skip`` per skipped optimizer step besides the per-line events), fatal errors,
    per-rank tracebacks (with their last lines), NCCL timeouts, and the exits the launchers report.

    Lines without a step number (wall clock, memory, overflow in the current wording) take the last
    step DeepSpeed announced before them, if any: an attribution, not a measurement.
    """
    events = [{**event, "detail": json.dumps(event["detail"])} for event in launcher_log.read_events(text)]
    frame = pd.DataFrame(events, columns=list(EVENT_COLUMNS))
    return frame.astype({"rank": "Int64", "step": "Int64", "line": "Int64"})


def stabiliser_events(path: str | Path) -> pd.DataFrame:
    """The loss stabiliser's events (``train/events.jsonl``, zerogate.contracts.records.StabiliserEvent) as
    event rows of kind ``stabiliser``, their own kind, value and action in ``detail``."""
    rows = []
    for event in read_lines(StabiliserEvent, path):
        detail = {"kind": event.kind, "value": event.value, "action": event.action}
        rows.append(
            {
                "kind": "stabiliser",
                "rank": event.rank,
                "step": event.step,
                "line": None,
                "message": f"{event.kind} = {event.value}: {event.action}",
                "detail": json.dumps(detail),
            }
        )
    frame = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    return frame.astype({"rank": "Int64", "step": "Int64", "line": "Int64"})


def event_table(events: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The events of one kind with their ``detail`` numbers as columns (e.g. the wall-clock timers)."""
    chosen = events[events["kind"] == kind]
    details = pd.DataFrame([json.loads(d) for d in chosen["detail"]], index=chosen.index)
    return pd.concat([chosen[["rank", "step", "line"]], details], axis=1).reset_index(drop=True)


def last_log_lines(text: str, rank: int | None, count: int = 12) -> list[str]:
    """The last lines the log holds for one rank (its ``[rankN]:`` lines), or of the whole log."""
    lines = text.replace("\r", "\n").splitlines()
    if rank is not None:
        tagged = [line for line in lines if line.startswith(f"[rank{rank}]:")]
        if tagged:
            return tagged[-count:]
    return [line for line in lines if line.strip()][-count:]


def run_metadata(
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    log_text: str,
    expected_steps: int | None = None,
    nodes: list[NodeFingerprint] | None = None,
) -> RunMeta:
    """What the run did as a whole: ranks, steps each completed, which ranks failed and how (one failure per
    line that shows one, with the rank zerogate.analysis.failure_attribution gives it)."""
    completed = {int(r): int(g["step"].max()) for r, g in steps.groupby("rank")} if len(steps) else {}
    launcher_events = events[events["line"].notna()] if len(events) else events
    attribution = attribute_events(launcher_events)
    failures: list[Failure] = []
    for found in attribution.lines():
        code = found.detail.get("code")
        failures.append(
            Failure(
                rank=found.rank,
                kind=found.kind,
                message=found.message,
                exit_code=None if code is None else int(code),
                last_lines=found.detail.get("last_lines") or last_log_lines(log_text, found.rank),
                line=found.line,
            )
        )
    counts = events["kind"].value_counts().to_dict() if len(events) else {}
    return RunMeta(
        # The summary's world size, or None: never the count of ranks that happen to have records.
        world_size=None if summary is None else summary.world_size,
        finished=summary is not None,
        expected_steps=expected_steps,
        steps_completed_per_rank=completed,
        failed_ranks=attribution.ranks,
        failures=failures,
        event_counts={k: int(v) for k, v in counts.items()},
        deepspeed_skipped_steps=_last_skipped(events),
        nodes=nodes or [],
    )


def _last_skipped(events: pd.DataFrame) -> ProgressSkips | None:
    """DeepSpeed's own cumulative skip count at its last progress line, with that step: evidence beside the
    overflow gate, never its statistic (it also counts the updates the loss stabiliser dropped)."""
    progress = events[events["kind"] == "ds_progress"]
    if not len(progress):
        return None
    last = progress.iloc[-1]
    return ProgressSkips(step=int(last["step"]), skipped=int(json.loads(last["detail"])["skipped"]))


def parse_run(
    metrics_dir: str | Path,
    launcher_logs: str | Path | list[str | Path],
    summary: TrainSummary | None,
    stabiliser_events_path: str | Path,
    expected_steps: int | None,
) -> tuple[pd.DataFrame, pd.DataFrame, RunMeta]:
    """The parse_logs rule's work: (steps, events, run metadata) from a run's per-rank records, launcher
    log (one per node on several nodes, node 0's first), summary (None when the run did not finish) and
    the loss stabiliser's events. Several nodes: each node's fingerprint (``metrics/node<i>.json``,
    written by its first rank) goes into the metadata's ``nodes``."""
    steps = read_rank_metrics(metrics_dir)
    logs = [launcher_logs] if isinstance(launcher_logs, (str, Path)) else launcher_logs
    log_text = "\n".join(Path(log).read_text(errors="replace") for log in logs)
    launcher_events = parse_launcher_log(log_text)
    nodes = [
        NodeFingerprint.read(path)
        for path in sorted(
            Path(metrics_dir).glob("node*.json"), key=lambda p: int(p.stem.removeprefix("node"))
        )
    ]
    meta = run_metadata(steps, launcher_events, summary, log_text, expected_steps, nodes)
    stabiliser = stabiliser_events(stabiliser_events_path)
    events = (
        pd.concat([launcher_events, stabiliser], ignore_index=True) if len(stabiliser) else launcher_events
    )
    return steps, events, meta
