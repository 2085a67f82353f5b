"""Turn the run's raw output into tidy tables: zerogate's per-rank JSON lines and the launcher's log.

DeepSpeed's log formats vary between releases (reference.md section 3), so the patterns match loosely.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

_RANK_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("ds_progress", re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+)")),
    (
        "overflow",
        re.compile(
            # Without "reducing to": the hysteresis variant, a skipped step that keeps the scale.
            r"OVERFLOW! Rank (?P<rank>\d+) Skipping step\. Attempted loss scale: (?P<attempted>[\d.e+]+)"
            r"(?:, reducing to (?P<new>[\d.e+]+))?"
        ),
    ),
    ("overflow", re.compile(r"Grad overflow on iteration:?\s*(?P<step>\d+)")),
    ("loss_scale_reduced", re.compile(r"Reducing dynamic loss scale from (?P<attempted>[\d.e+]+) to (?P<new>[\d.e+]+)")),
    ("fatal_loss_scale", re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore")),
    ("rank_exit_ok", re.compile(r"Process (?P<pid>\d+) exits successfully")),
    ("rank_exit_error", re.compile(r"--local_rank=(?P<rank>\d+)'.*exits with return code = (?P<code>-?\d+)")),
]


def read_rank_metrics(metrics_dir: str | Path) -> pd.DataFrame:
    """All ranks' step records, one row per (rank, step), sorted."""
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(metrics_dir).glob("rank*.jsonl")):
        with open(path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}: line {number}: not valid JSON ({error.msg})") from None
    if not rows:
        return pd.DataFrame(columns=["rank", "step"])
    return pd.DataFrame(rows).sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def _number(text: str | None) -> float | None:
    return None if text is None else float(text)


def parse_launcher_log(text: str) -> pd.DataFrame:
    """Events from the launcher's combined output: DeepSpeed progress, fp16 overflows, fatal errors,
    per-rank tracebacks (with their last lines) and exits."""
    events: list[dict[str, Any]] = []
    tracebacks: dict[int | None, list[str]] = {}
    for number, raw in enumerate(text.replace("\r", "\n").splitlines(), start=1):
        prefix = _RANK_PREFIX.match(raw)
        prefix_rank = int(prefix.group("rank")) if prefix else None
        line = raw[prefix.end() :] if prefix else raw
        if line.startswith("Traceback (most recent call last)"):
            tracebacks[prefix_rank] = [line]
            continue
        if prefix_rank in tracebacks and (line.startswith(" ") or not line.strip()):
            tracebacks[prefix_rank].append(line)
            continue
        if prefix_rank in tracebacks:  # the exception line closes the traceback
            lines = tracebacks.pop(prefix_rank) + [line]
            events.append(
                {"kind": "traceback", "rank": prefix_rank, "step": None, "line": number, "message": line.strip(),
                 "detail": "\n".join(lines[-12:])}
            )
            # The exception line itself may be a known event (the fatal loss-scale exception): fall through.
        for kind, pattern in _PATTERNS:
            match = pattern.search(line)
            if not match:
                continue
            fields = match.groupdict()
            rank = fields.get("rank")
            step = fields.get("step")
            events.append(
                {
                    "kind": kind,
                    "rank": int(rank) if rank is not None else prefix_rank,
                    "step": int(step) if step is not None else None,
                    "line": number,
                    "message": line.strip(),
                    "detail": json.dumps(
                        {k: _number(v) for k, v in fields.items() if k in ("attempted", "new", "skipped", "code")}
                    ),
                }
            )
            break
    columns = ["kind", "rank", "step", "line", "message", "detail"]
    frame = pd.DataFrame(events, columns=columns)
    return frame.astype({"rank": "Int64", "step": "Int64", "line": "Int64"})
