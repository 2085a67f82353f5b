"""parse_logs' run metadata (``parsed/run.json``) and the columns of its two tables
(``parsed/steps.parquet``: one row per rank and optimizer step, the StepRecord's keys;
``parsed/events.parquet``:
one row per notable launcher-log line or stabiliser event)."""

from __future__ import annotations

from typing import Any

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.machine import NodeFingerprint

EVENT_COLUMNS = ("kind", "rank", "step", "line", "message", "detail")  # detail: a JSON object as text


class Failure(Record):
    """One line of the launcher log that shows a rank's failure (zerogate.analysis.failure_attribution): a
    traceback, a non-zero exit, a watchdog failure, a kill, an abort."""

    rank: int | None  # None: the log does not say which rank
    kind: str
    message: str
    exit_code: int | None = None
    last_lines: list[str] = []
    line: int | None = None  # the launcher log's line that shows it


class ProgressSkips(Record):
    """DeepSpeed's own cumulative skip count at its last progress line (evidence, never a statistic)."""

    step: int
    skipped: int


class RunMeta(Artefact):
    """What the run did as a whole: its world size, the last step each rank recorded, which ranks failed
    and how."""

    CONTRACT = "run_meta"

    world_size: int | None  # the summary's; None when the run did not finish (never the ranks with records)
    finished: bool
    expected_steps: int | None
    steps_completed_per_rank: dict[int, int]
    failed_ranks: list[int]
    failures: list[Failure]
    event_counts: dict[str, int]
    deepspeed_skipped_steps: ProgressSkips | None
    nodes: list[NodeFingerprint] = []


def missing_columns(columns: Any, required: tuple[str, ...]) -> list[str]:
    """The ``required`` columns a table (its ``columns``) lacks."""
    present = set(columns)
    return [name for name in required if name not in present]
