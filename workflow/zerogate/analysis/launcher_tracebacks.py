"""Python tracebacks in a launcher log (zerogate.analysis.launcher_log reads the log), assembled per writer
(host, rank, local rank) from its messages: one ``traceback`` event per traceback at its exception line (at
its last line when the log cuts it off).

- A chained exception ("During handling of the above exception ...", "The above exception was the direct
  cause ...") is one traceback.
- A traceback whose header an excerpt or a paste cut off is still one: it starts at its first frame
  (``File "x.py", line 3``), or at a caret line or a rich traceback box's line that an exception line
  confirms.
- The traceback torch elastic's ChildFailedError summary prints again in its ``traceback :`` field is the
  failed rank's, already in the log: it is not read again.
- Unprefixed tracebacks of one writer that interleave stay apart and say so (``ambiguous``).
- A traceback through a launcher's frames (DeepSpeed's launcher, ``torch.distributed.run`` or ``.launch``,
  accelerate's launch command) is the launcher's report of a child's exit: its detail says
  ``"launcher": true``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from zerogate.analysis.launcher_events import EventLog
from zerogate.analysis.launcher_messages import EXCEPTION_NAME, Message

Writer = tuple[str | None, int | None, int | None]

_TRACEBACK_HEADER = re.compile(r"Traceback \(most recent call last\)")
_CHAIN = re.compile(r"During handling of the above exception|The above exception was the direct cause")
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*)(?P<colon>:.*)?")
# A traceback's first frame when its header is gone: "  File "x.py", line 3, in f" (any indentation).
_FIRST_FRAME = re.compile(r'\s*File "[^"]+", line \d+')
# Lines that belong to a traceback but prove none on their own: a caret line under a source line, a rich
# traceback box's side or bottom. An exception line after them makes them a headless traceback's.
_TAIL_LINE = re.compile(r"\s*[\^~]+\s*$|[│╰]")
# torch elastic's ChildFailedError summary: "  traceback : ..." then, when the child recorded its error,
# the child's traceback again, indented.
_SUMMARY_TRACEBACK_FIELD = re.compile(r"\s+traceback\s*:")
# A traceback through one of these was raised by a launcher reporting its child's exit.
_LAUNCHER_FRAMES = re.compile(
    r"deepspeed[/\\]launcher[/\\]|torch[/\\]distributed[/\\](?:launch|run)\.py"
    r"|accelerate[/\\]commands[/\\]launch|accelerate-launch"
)
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


def _is_frame(text: str) -> bool:
    """A traceback's own line: an indented frame or source line, a caret line, a rich box's border, a
    frame whose indentation a paste lost."""
    return not text.strip() or text[:1].isspace() or text.startswith(("│", "╰", 'File "'))


@dataclass
class _Traceback:
    writer: Writer
    lines: list[str]
    last_seen: int  # message index of its last line
    last_line: int  # the log line of its last line
    interleaved: bool = False
    header_cut: bool = False  # it starts at a frame: the log has no header for it
    confirmed: bool = True  # False while it holds only lines that prove no traceback

    def frame(self, message: Message, index: int) -> None:
        if message.text.strip():  # a blank line belongs to the traceback but says nothing
            self.lines.append(message.text)
            self.last_line = message.line
            self.confirmed = self.confirmed or bool(_FIRST_FRAME.match(message.text))
        self.last_seen = index


@dataclass
class TracebackReader:
    """The tracebacks of a log, fed message by message; their events go to ``log`` in reading order."""

    log: EventLog
    open_tracebacks: dict[Writer, list[_Traceback]] = field(default_factory=dict)
    finished: dict[Writer, tuple[_Traceback, dict[str, Any]]] = field(default_factory=dict)
    summary_field: set[Writer] = field(default_factory=set)  # writers inside a summary's traceback field

    def feed(self, message: Message, index: int) -> bool:
        """Feed a message to the tracebacks of its writer; True when it was a traceback's header or frame,
        or a line of a summary's reprinted traceback (never an event of its own; the exception line that
        ends a traceback may be one)."""
        key, text = message.writer, message.text
        if self._in_summary_field(key, text):
            return True
        header = _TRACEBACK_HEADER.search(text)
        if header and (header.start() == 0 or text.startswith("╭")):
            self._open(key, message, index)
            return True
        opened = self.open_tracebacks.get(key)
        if not opened:
            return self._open_headless(key, message, index)
        if _is_frame(text):
            opened[-1].frame(message, index)
            return True
        if is_exception_line(text):
            self._close(key, message)
        else:  # lines that proved no traceback, followed by something else: they were none
            opened[:] = [t for t in opened if t.confirmed]
            if not opened:
                del self.open_tracebacks[key]
        return False

    def _in_summary_field(self, key: Writer, text: str) -> bool:
        """Whether the message is the ``traceback :`` field of a ChildFailedError summary or a line of the
        traceback it prints again (indented, up to the summary's next unindented line)."""
        if _SUMMARY_TRACEBACK_FIELD.match(text):
            self.summary_field.add(key)
            return False  # the field's own line is read by the exit reports
        if key in self.summary_field:
            # The reprint's header loses its indentation where the log's glued messages are cut.
            if not text.strip() or text[:1].isspace() or _TRACEBACK_HEADER.match(text):
                return True
            self.summary_field.discard(key)
        return False

    def _open_headless(self, key: Writer, message: Message, index: int) -> bool:
        """A frame of a traceback whose header is not in the log opens one; a caret or rich-box line opens
        one that an exception line or a frame must confirm."""
        text = message.text
        first_frame = bool(_FIRST_FRAME.match(text))
        if not first_frame and not _TAIL_LINE.match(text):
            return False
        headless = _Traceback(key, [text], index, message.line, header_cut=True, confirmed=first_frame)
        self.open_tracebacks[key] = [headless]
        return True

    def _open(self, key: Writer, message: Message, index: int) -> None:
        previous = self.finished.pop(key, None)
        if previous and _CHAIN.match(previous[0].lines[-1]):  # a chained exception: one traceback goes on
            chained, event = previous
            self.log.events.remove(event)
            chained.frame(message, index)
            self.open_tracebacks.setdefault(key, []).append(chained)
            return
        opened = self.open_tracebacks.setdefault(key, [])
        for stale in [t for t in opened if index - t.last_seen > _STALE_AFTER or not t.confirmed]:
            opened.remove(stale)
            if stale.confirmed:
                self._emit(stale, stale.last_line, cut_off=True)
        new = _Traceback(key, [message.text], index, message.line)
        if opened:  # another one of this writer is still receiving frames: two processes interleave
            new.interleaved = True
            for other in opened:
                other.interleaved = True
        opened.append(new)

    def _close(self, key: Writer, message: Message) -> None:
        opened = self.open_tracebacks[key]
        traceback = opened.pop(0)  # the oldest: the first exception printed ends the first traceback
        if not opened:
            del self.open_tracebacks[key]
        traceback.lines.append(message.text)
        traceback.confirmed = True
        self.finished[key] = (traceback, self._emit(traceback, message.line))

    def _emit(self, traceback: _Traceback, line: int, cut_off: bool = False) -> dict[str, Any]:
        """The traceback's event at ``line`` (its exception line; its last line when it was cut off)."""
        host, rank, local_rank = traceback.writer
        detail: dict[str, Any] = {"last_lines": traceback.lines[-_TRACEBACK_LINES_KEPT:]}
        if host is not None:
            detail["host"] = host
        if local_rank is not None:
            detail["local_rank"] = local_rank
        if cut_off:
            detail["cut_off"] = True
        if traceback.header_cut:
            detail["header_cut"] = True
        if traceback.interleaved:
            detail["ambiguous"] = INTERLEAVED
        if any(_LAUNCHER_FRAMES.search(line) for line in traceback.lines):
            detail["launcher"] = True
        return self.log.emit("traceback", Message(line=line, text=traceback.lines[-1]), rank, None, detail)

    def chain_marker(self, message: Message) -> None:
        """ "During handling of the above exception ...": the next traceback of this writer continues."""
        finished = self.finished.get(message.writer)
        if finished and _CHAIN.match(message.text):
            finished[0].lines.append(message.text)

    def finish(self) -> None:
        for opened in self.open_tracebacks.values():
            for traceback in opened:
                if traceback.confirmed:
                    self._emit(traceback, traceback.last_line, cut_off=True)
        self.open_tracebacks.clear()

    def raised_by_launcher(self, message: Message) -> bool:
        """Whether the traceback this exception line just ended went through a launcher's frames."""
        finished = self.finished.get(message.writer)
        return bool(finished) and finished[1]["line"] == message.line and "launcher" in finished[1]["detail"]
