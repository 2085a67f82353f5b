"""Which ranks of a launcher log failed, and the lines that say so: the one definition of a failed rank, read
from the events zerogate.analysis.launcher_log finds (the judge_log rule's, and the parse_logs rule's
``parsed/events.parquet``). Both rules, and the gates that count failed ranks, take it from here.

A rank failed when the log shows, for that rank,

- a traceback of its own: under its ``[rankN]:`` prefix, or without a prefix in a log of one process;
- an exit error a launcher or scheduler reports for it;
- a watchdog failure: an NCCL timeout, or a watchdog that got stuck or signalled its own failure;
- a kill: the launcher killing its subprocess, in a log of one process;
- or an abort it printed: a fatal loss-scale abort, a C++ ``terminate called``.

A failure whose rank the log does not tell (a traceback without a prefix among several processes, an exit
report that names a process but no rank) is a failure naming no rank. A traceback through a launcher's
frames is the launcher's report of a child's exit, and the launcher killing its subprocesses after one
failed is its teardown: neither is a failure of its own, and they count as a failure naming no rank only
when nothing else in the log reports one.

A log shows one process when a launcher, ZeRO or NCCL states one (``dist_world_size=1``, ``partition count
[1]``, DeepSpeed's exit line for ``--local_rank=0``, the last and only process it started) and nothing
shows more (another rank, a second kill or clean exit, several nodes).

An exit by signal that DeepSpeed's launcher reports with the command of the last process it started (local
rank N) is one of local ranks 0 to N; the ranks with a traceback of their own exited with an exception, not a
signal, so when exactly one of the N+1 has none, the exit is that rank's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from zerogate.analysis.launcher_events import FAILURE_KINDS
from zerogate.analysis.launcher_failures import LOCAL_RANK_ON_SEVERAL_NODES
from zerogate.analysis.launcher_log import SEVERAL_HOSTS
from zerogate.analysis.launcher_tracebacks import INTERLEAVED

EXIT_KINDS = ("rank_exit_error", "launcher_exit_error")
# How each failure kind shows a failed rank.
CAUSES = {
    "traceback": "traceback",
    "rank_exit_error": "exit",
    "launcher_exit_error": "exit",
    "nccl_timeout": "watchdog",
    "watchdog_failure": "watchdog",
    "launcher_kill": "kill",
    "process_abort": "abort",
    "fatal_loss_scale": "abort",
}


@dataclass(frozen=True)
class FailureLine:
    """One failure event: its line, kind, text and detail, and the rank it is about (None: not told)."""

    line: int | None
    kind: str
    message: str
    detail: Mapping[str, Any]
    rank: int | None

    @property
    def cause(self) -> str:
        return CAUSES[self.kind]


@dataclass(frozen=True)
class FailedRank:
    """A failed rank (None: the failures whose rank the log does not tell) and the lines that make it so."""

    rank: int | None
    lines: tuple[FailureLine, ...]

    @property
    def causes(self) -> list[str]:
        return sorted({line.cause for line in self.lines})


@dataclass(frozen=True)
class Attribution:
    """Every failure of a log: the failed ranks, ascending, with their lines; the failures naming no rank;
    and each exit a launcher or scheduler reports as (rank, code), in line order."""

    failed: tuple[FailedRank, ...]
    unnamed: FailedRank | None
    exits: tuple[tuple[int | None, int], ...]

    @property
    def ranks(self) -> list[int]:
        return [failed.rank for failed in self.failed if failed.rank is not None]

    @property
    def rank_count(self) -> int:
        """The failed ranks; failures that name none count as one rank."""
        return len(self.failed) or (1 if self.unnamed else 0)

    def lines(self) -> list[FailureLine]:
        """Every failure line, named ranks' and the others', in line order."""
        groups = [*self.failed, *([self.unnamed] if self.unnamed else [])]
        found = [line for group in groups for line in group.lines]
        return sorted(found, key=lambda f: (f.line is None, f.line or 0))


def _rows(events: pd.DataFrame) -> list[dict[str, Any]]:
    """The events table's rows with their detail read back into a dict (and pandas' NA as None)."""
    rows = []
    for kind, rank, line, message, detail in zip(
        events["kind"], events["rank"], events["line"], events["message"], events["detail"]
    ):
        rows.append(
            {
                "kind": kind,
                "rank": None if pd.isna(rank) else int(rank),
                "line": None if pd.isna(line) else int(line),
                "message": message,
                "detail": json.loads(detail) if isinstance(detail, str) else dict(detail),
            }
        )
    return rows


def _shows_one_process(rows: Iterable[dict[str, Any]]) -> bool:
    """Whether the log states one process and shows no second one (the module docstring's rule)."""
    one = several = False
    kills = clean_exits = 0
    for row in rows:
        detail, kind, rank = row["detail"], row["kind"], row["rank"]
        stated = detail.get("world_size", detail.get("processes", detail.get("started_local_ranks")))
        if stated is not None:
            one, several = one or stated == 1, several or stated > 1
        kills += kind == "launcher_kill"
        clean_exits += kind == "rank_exit_ok"
        several = several or (rank is not None and rank > 0) or detail.get("local_rank", 0) > 0
        several = several or detail.get("ambiguous") in (INTERLEAVED, LOCAL_RANK_ON_SEVERAL_NODES)
    return one and not several and kills < 2 and clean_exits < 2


def _signal_exit_rank(row: dict[str, Any], traced: set[int]) -> int | None:
    """The rank of an exit by signal that names the last started process of N+1: the one of local ranks 0
    to N without a traceback of its own, when exactly one is left (never on a log of several nodes)."""
    started = row["detail"].get("started_local_ranks")
    if started is None or row["detail"].get("code", 0) >= 0:
        return None
    left = set(range(int(started))) - traced
    return left.pop() if len(left) == 1 else None


def attribute(rows: list[dict[str, Any]]) -> Attribution:
    """The failures of a log's events (dicts with kind, rank, line, message and detail as a dict)."""
    single = _shows_one_process(rows)
    own: list[dict[str, Any]] = []
    launcher: list[dict[str, Any]] = []  # the launcher's reports: its tracebacks, its kills of several
    for row in rows:
        if row["kind"] in FAILURE_KINDS:
            by_launcher = row["kind"] == "traceback" and row["detail"].get("launcher")
            (launcher if by_launcher or (row["kind"] == "launcher_kill" and not single) else own).append(row)
    several_nodes = any(
        r["detail"].get("source") == SEVERAL_HOSTS
        or r["detail"].get("ambiguous") == LOCAL_RANK_ON_SEVERAL_NODES
        for r in rows
    )
    traced = {r["rank"] for r in own if r["kind"] == "traceback" and r["rank"] is not None}
    named: dict[int, list[FailureLine]] = {}
    unnamed: list[FailureLine] = []
    exits: list[tuple[int | None, int]] = []
    for row in own:
        rank = row["rank"]
        if rank is None and not several_nodes:
            rank = 0 if single else _signal_exit_rank(row, traced) if row["kind"] in EXIT_KINDS else None
        found = FailureLine(row["line"], row["kind"], row["message"], row["detail"], rank)
        (unnamed if rank is None else named.setdefault(rank, [])).append(found)
        if row["kind"] in EXIT_KINDS:
            exits.append((rank, int(row["detail"]["code"])))
    if not named and not unnamed:  # the launcher's report is then the only sign of a failure
        unnamed = [FailureLine(r["line"], r["kind"], r["message"], r["detail"], None) for r in launcher]
    return Attribution(
        failed=tuple(FailedRank(rank, tuple(lines)) for rank, lines in sorted(named.items())),
        unnamed=FailedRank(None, tuple(unnamed)) if unnamed else None,
        exits=tuple(exits),
    )


def attribute_events(events: pd.DataFrame) -> Attribution:
    """:func:`attribute` over an events table (zerogate.contracts.parsed.EVENT_COLUMNS)."""
    return attribute(_rows(events))
