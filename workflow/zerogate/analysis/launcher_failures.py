"""Which rank of a launcher log failed, and how (zerogate.analysis.launcher_log reads the log): Python
tracebacks assembled per writer (unprefixed tracebacks that interleave stay apart and say so; a chained
exception is one traceback), the launchers' exit reports (torch elastic's ChildFailedError summary, Slurm's
task exit, a CalledProcessError, DeepSpeed's launcher line without a rank), and one event per failure where
a log reports it twice (torch's agent line and its summary name one exit; torch repeats the NCCL watchdog's
line in its abort message). Where the log cannot tell which rank failed, the event's detail says so in an
``ambiguous`` note."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from zerogate.analysis.launcher_events import EventLog
from zerogate.analysis.launcher_messages import EXCEPTION_NAME, Message

# Launcher reports that name no rank, or whose format needs more than one line.
_EXIT_WITHOUT_RANK = re.compile(r"\] exits with return code = (?P<code>-?\d+)")
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
# A traceback through one of these was raised by a launcher reporting its child's exit.
_LAUNCHER_FRAMES = re.compile(
    r"deepspeed[/\\]launcher[/\\]|torch[/\\]distributed[/\\](?:launch|run)\.py"
    r"|accelerate[/\\]commands[/\\]launch"
)
SUMMARY_SOURCE = "torch elastic ChildFailedError summary"
NO_LOCAL_RANK = "the launcher's command line names no --local_rank: which rank exited is not in the log"
LOCAL_RANK_ON_SEVERAL_NODES = (
    "a local rank, and the log shows several nodes: the global rank is not in the line"
)


_TRACEBACK_HEADER = re.compile(r"Traceback \(most recent call last\)")
_CHAIN = re.compile(r"During handling of the above exception|The above exception was the direct cause")
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*)(?P<colon>:.*)?")
_TRACEBACK_LINES_KEPT = 12
_STALE_AFTER = 8  # messages without a frame after which an open traceback is taken as cut off
INTERLEAVED = (
    "interleaved with another traceback of the same writer (no rank prefix): frames between the two "
    "headers may belong to either"
)


def is_exception_line(text: str) -> bool:
    """``RuntimeError: boom``, ``KeyboardInterrupt``, ``torch.distributed...ChildFailedError:``: a dotted name
    in CamelCase (not a logger's ``WARNING:``, not ``ninja:``), with a message after a colon or a name that
    reads as an exception's."""
    found = _EXCEPTION_LINE.fullmatch(text.rstrip())
    if not found or not found["name"][0].isupper() or found["name"].isupper():
        return False
    return found["colon"] is not None or bool(EXCEPTION_NAME.search(found["name"]))


@dataclass
class _Traceback:
    writer: tuple[str | None, int | None, int | None]
    lines: list[str]
    last_seen: int  # message index of its last line
    last_line: int  # the log line of its last line
    interleaved: bool = False

    def frame(self, message: Message, index: int) -> None:
        if message.text.strip():  # a blank line belongs to the traceback but says nothing
            self.lines.append(message.text)
            self.last_line = message.line
        self.last_seen = index


def _is_frame(text: str) -> bool:
    """A traceback's own line: an indented frame or source line, a caret line, a rich box's border, a
    frame whose indentation a paste lost."""
    return not text.strip() or text[:1].isspace() or text.startswith(("│", "╰", 'File "'))


@dataclass
class FailureReader:
    """The failure reports of a log, fed message by message: Python tracebacks assembled per writer (host,
    rank, local rank), torch elastic's ChildFailedError summary spread over several lines, and the exit
    reports that name no rank or need more than one format (Slurm, CalledProcessError, DeepSpeed's launcher).
    Its events go to ``log`` in reading order."""

    log: EventLog
    open_tracebacks: dict[tuple, list[_Traceback]] = field(default_factory=dict)
    finished: dict[tuple, tuple[_Traceback, dict[str, Any]]] = field(default_factory=dict)
    summary_host: str | None = None
    summary_rank: tuple[int, int] | None = None

    def traceback_line(self, message: Message, index: int) -> bool:
        """Feed a message to the tracebacks of its writer; True when it was a traceback's header or frame
        (never an event of its own; the exception line that ends one may be)."""
        key, text = message.writer, message.text
        header = _TRACEBACK_HEADER.search(text)
        if header and (header.start() == 0 or text.startswith("╭")):
            self._open(key, message, index)
            return True
        opened = self.open_tracebacks.get(key)
        frame = bool(opened) and _is_frame(text)
        if frame:
            opened[-1].frame(message, index)
        elif opened and is_exception_line(text):
            self._close(key, message)
        return frame

    def _open(self, key: tuple, message: Message, index: int) -> None:
        previous = self.finished.pop(key, None)
        if previous and _CHAIN.match(previous[0].lines[-1]):  # a chained exception: one traceback goes on
            chained, event = previous
            self.log.events.remove(event)
            chained.frame(message, index)
            self.open_tracebacks.setdefault(key, []).append(chained)
            return
        opened = self.open_tracebacks.setdefault(key, [])
        for stale in [t for t in opened if index - t.last_seen > _STALE_AFTER]:
            opened.remove(stale)
            self._emit_traceback(stale, stale.last_line, cut_off=True)
        new = _Traceback(key, [message.text], index, message.line)
        if opened:  # another one of this writer is still receiving frames: two processes interleave
            new.interleaved = True
            for other in opened:
                other.interleaved = True
        opened.append(new)

    def _close(self, key: tuple, message: Message) -> None:
        opened = self.open_tracebacks[key]
        traceback = opened.pop(0)  # the oldest: the first exception printed ends the first traceback
        if not opened:
            del self.open_tracebacks[key]
        traceback.lines.append(message.text)
        self.finished[key] = (traceback, self._emit_traceback(traceback, message.line))

    def _emit_traceback(self, traceback: _Traceback, line: int, cut_off: bool = False) -> dict[str, Any]:
        """The traceback's event at ``line`` (its exception line; its last line when it was cut off)."""
        host, rank, local_rank = traceback.writer
        detail: dict[str, Any] = {"last_lines": traceback.lines[-_TRACEBACK_LINES_KEPT:]}
        if host is not None:
            detail["host"] = host
        if local_rank is not None:
            detail["local_rank"] = local_rank
        if cut_off:
            detail["cut_off"] = True
        if traceback.interleaved:
            detail["ambiguous"] = INTERLEAVED
        event = self.log.emit("traceback", Message(line=line, text=traceback.lines[-1]), rank, None, detail)
        event["launcher"] = any(_LAUNCHER_FRAMES.search(frame) for frame in traceback.lines)
        return event

    def chain_marker(self, message: Message) -> None:
        """ "During handling of the above exception ...": the next traceback of this writer continues."""
        finished = self.finished.get(message.writer)
        if finished and _CHAIN.match(message.text):
            finished[0].lines.append(message.text)

    def finish(self) -> None:
        for opened in self.open_tracebacks.values():
            for traceback in opened:
                self._emit_traceback(traceback, traceback.last_line, cut_off=True)
        self.open_tracebacks.clear()

    def launcher_report(self, message: Message) -> None:
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
        slurm = _SLURM_EXIT.search(text)
        if slurm:
            self.log.emit(
                "launcher_exit_error",
                message,
                None,
                None,
                {
                    "code": float(slurm["code"]),
                    "source": "slurm",
                    "node": slurm["node"],
                    "task": int(slurm["task"]),
                },
            )
        called = _CALLED_PROCESS.search(text)
        if called and (
            _LOCAL_RANK_ARG.search(called["command"])
            or _PYTHON_COMMAND.match(called["command"])
            or self._raised_by_launcher(message)
        ):
            local = _LOCAL_RANK_ARG.search(called["command"])
            detail = {"code": float(called["code"]), "source": "CalledProcessError"}
            if local is None:
                detail["ambiguous"] = NO_LOCAL_RANK
            self.log.emit(
                "rank_exit_error" if local else "launcher_exit_error",
                message,
                int(local["rank"]) if local else None,
                None,
                detail,
            )
        bare = _EXIT_WITHOUT_RANK.search(text)
        if bare and not _LOCAL_RANK_ARG.search(text):
            self.log.emit(
                "launcher_exit_error",
                message,
                None,
                None,
                {"code": float(bare["code"]), "source": "deepspeed launcher", "ambiguous": NO_LOCAL_RANK},
            )

    def _raised_by_launcher(self, message: Message) -> bool:
        """Whether the traceback this exception line just ended went through a launcher's frames."""
        finished = self.finished.get(message.writer)
        return bool(finished) and finished[1]["line"] == message.line and finished[1]["launcher"]


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
    message."""
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
