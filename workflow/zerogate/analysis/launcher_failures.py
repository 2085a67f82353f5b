"""The exits launchers and schedulers report in a launcher log (zerogate.analysis.launcher_log reads the log;
zerogate.analysis.launcher_tracebacks its tracebacks): DeepSpeed's launcher line, torch elastic's agent line
and ChildFailedError summary, Slurm's task exit, a CalledProcessError; and one event per failure where a log
reports it twice (torch's agent line and its summary name one exit; torch repeats the NCCL watchdog's line
in its abort message). Where the log cannot tell which rank exited, the event's detail says so in an
``ambiguous`` note.

DeepSpeed's launcher (every release) and torch's old ``torch.distributed.launch`` report a child's exit
with the command of the LAST process they started, not of the one that exited: ``['python', 'train.py',
'--local_rank=4', ...] exits with return code = -6`` says that one of the node's five processes (local
ranks 0 to 4) exited with -6. Only ``--local_rank=0``, the last and so the only process of its node, names
the process that failed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zerogate.analysis.launcher_events import EventLog
from zerogate.analysis.launcher_messages import Message
from zerogate.analysis.launcher_tracebacks import TracebackReader

# DeepSpeed's launcher: "[launch.py:434:sigkill_handler] ['python', ..., '--local_rank=0', ...] exits with
# return code = -9"; without a --local_rank when the launcher ran with --no_local_rank.
_LAUNCHER_EXIT = re.compile(r"--local_rank[= ](?P<rank>\d+)'.*exits with return code = (?P<code>-?\d+)")
_LAUNCHER_EXIT_WITHOUT_RANK = re.compile(r"\] exits with return code = (?P<code>-?\d+)")
_CALLED_PROCESS = re.compile(
    r"CalledProcessError: Command '(?P<command>.*)' returned non-zero exit status "
    r"(?P<code>-?\d+)"
)
_LOCAL_RANK_ARG = re.compile(r"--local_rank[= ](?P<rank>\d+)")
# A command list that runs Python: a training process the launcher started (not ninja, not hostname -I).
_PYTHON_COMMAND = re.compile(r"\[\s*'[^']*python[\d.]*(?:\.exe)?'")
_SLURM_EXIT = re.compile(
    r"srun: error: (?P<node>[\w.-]+): task (?P<task>\d+): Exited with exit code (?P<code>-?\d+)"
)
# torch elastic's ChildFailedError summary: "rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: 14750)".
_SUMMARY_HOST = re.compile(r"^\s*host\s*:\s*(?P<host>\S+)\s*$")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>-?\d+) \(local_rank: (?P<local_rank>\d+)\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
SUMMARY_SOURCE = "torch elastic ChildFailedError summary"
DEEPSPEED_LAUNCHER = "deepspeed launcher"
NO_LOCAL_RANK = "the launcher's command line names no --local_rank: which rank exited is not in the log"
LOCAL_RANK_ON_SEVERAL_NODES = (
    "a local rank, and the log shows several nodes: the global rank is not in the line"
)
LAST_STARTED = (
    "the launcher prints the command of the last process it started (local rank {local_rank}), not of "
    "the one that exited: which of its node's local ranks 0 to {local_rank} exited is not in the line"
)


def last_started_exit(local_rank: int, code: float, source: str | None) -> tuple[int | None, dict[str, Any]]:
    """(rank, detail) of an exit a launcher reported with the command of the last process it started: local
    rank 0 is the only process of its node and the one that exited; a later one says only how many local
    processes there were (``started_local_ranks``)."""
    detail: dict[str, Any] = {"code": code} if source is None else {"code": code, "source": source}
    detail["started_local_ranks"] = local_rank + 1
    if local_rank == 0:
        return 0, detail
    return None, {**detail, "ambiguous": LAST_STARTED.format(local_rank=local_rank)}


@dataclass
class ExitReader:
    """The exit reports of a log, fed message by message: those that name no rank or need more than one
    format or line (DeepSpeed's launcher, torch elastic's ChildFailedError summary spread over several lines,
    Slurm, CalledProcessError). A CalledProcessError is an exit when it ran Python, names a --local_rank, or a
    launcher raised it (``tracebacks`` says which traceback it ended)."""

    log: EventLog
    tracebacks: TracebackReader
    multi_node: bool = False  # the log shows several nodes: a local rank is not the global one
    summary_host: str | None = None
    summary_rank: tuple[int, int] | None = None

    def read(self, message: Message) -> None:
        self._summary(message)
        self._deepspeed(message)
        self._slurm(message)
        self._called_process(message)

    def _summary(self, message: Message) -> None:
        text = message.text
        host = _SUMMARY_HOST.match(text)
        if host:
            self.summary_host = host["host"]
        rank = _SUMMARY_RANK.match(text)
        if rank:
            self.summary_rank = (int(rank["rank"]), int(rank["local_rank"]))
        code = _SUMMARY_EXIT.match(text)
        if code and self.summary_rank:
            (global_rank, local_rank), self.summary_rank = self.summary_rank, None
            detail = {
                "code": float(code["code"]),
                "pid": int(code["pid"]),
                "local_rank": local_rank,
                "source": SUMMARY_SOURCE,
            }
            if self.summary_host:
                detail["node"] = self.summary_host
            self.log.emit("rank_exit_error", message, global_rank, None, detail)

    def _deepspeed(self, message: Message) -> None:
        found = _LAUNCHER_EXIT.search(message.text)
        if found is None:
            bare = _LAUNCHER_EXIT_WITHOUT_RANK.search(message.text)
            if bare and not _LOCAL_RANK_ARG.search(message.text):
                detail = {
                    "code": float(bare["code"]),
                    "source": DEEPSPEED_LAUNCHER,
                    "ambiguous": NO_LOCAL_RANK,
                }
                self.log.emit("launcher_exit_error", message, None, None, detail)
            return
        rank, detail = last_started_exit(int(found["rank"]), float(found["code"]), None)
        if rank is not None and self.multi_node:
            detail["ambiguous"] = LOCAL_RANK_ON_SEVERAL_NODES
        self.log.emit("rank_exit_error", message, rank, None, detail)

    def _slurm(self, message: Message) -> None:
        slurm = _SLURM_EXIT.search(message.text)
        if slurm:
            detail = {
                "code": float(slurm["code"]),
                "source": "slurm",
                "node": slurm["node"],
                "task": int(slurm["task"]),
            }
            self.log.emit("launcher_exit_error", message, None, None, detail)

    def _called_process(self, message: Message) -> None:
        called = _CALLED_PROCESS.search(message.text)
        if not called:
            return
        local = _LOCAL_RANK_ARG.search(called["command"])
        if local is None and not (
            _PYTHON_COMMAND.match(called["command"]) or self.tracebacks.raised_by_launcher(message)
        ):
            return
        code = float(called["code"])
        if local is None:
            detail = {"code": code, "source": "CalledProcessError", "ambiguous": NO_LOCAL_RANK}
            self.log.emit("launcher_exit_error", message, None, None, detail)
            return
        rank, detail = last_started_exit(int(local["rank"]), code, "CalledProcessError")
        self.log.emit("rank_exit_error", message, rank, None, detail)


# ---- failures reported twice --------------------------------------------------------------------------


def merge_exits(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One event per process exit: torch's agent line and its ChildFailedError summary name the same pid
    (the summary's rank is kept: it is the global one); a launcher line printed twice is one exit."""
    kept: list[dict[str, Any]] = []
    seen: dict[tuple, dict[str, Any]] = {}
    for event in events:
        if event["kind"] not in ("rank_exit_error", "launcher_exit_error"):
            kept.append(event)
            continue
        detail = event["detail"]
        key = (event["host"], detail["pid"]) if "pid" in detail else (event["host"], event["message"])
        first = seen.get(key)
        if first is None:
            seen[key] = event
            kept.append(event)
            continue
        first["detail"] = {
            **detail,
            **first["detail"],
            "also_reported_at_lines": [*first["detail"].get("also_reported_at_lines", []), event["line"]],
        }
        if detail.get("source") == SUMMARY_SOURCE:
            first["rank"] = event["rank"]
            first["detail"].pop("ambiguous", None)
    return kept


def merge_timeouts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One NCCL timeout per (host, rank, collective): torch repeats the watchdog's line in its abort
    message, and newer torch adds a 'failure detected by watchdog' line for the same collective."""
    kept, seen = [], {}
    for event in events:
        if event["kind"] != "nccl_timeout":
            kept.append(event)
            continue
        key = (event["host"], event["rank"], event["detail"].get("seq"))
        if key in seen:
            seen[key]["detail"].setdefault("also_reported_at_lines", []).append(event["line"])
            continue
        seen[key] = event
        kept.append(event)
    return kept
