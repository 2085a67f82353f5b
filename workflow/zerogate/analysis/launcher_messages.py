"""Pass 1 of reading a launcher log (zerogate.analysis.launcher_log): its text as messages. Physical lines
lose the prefixes launchers, schedulers and shells put before them (a pdsh host ``10.141.250.231: ``,
torch's ``[rank6]:``, torchrun's ``[default0]:``, OpenMPI's ``[1,3]<stdout>:``, Slurm's ``12: `` task
label, a captured ``stderr: ``, a paste's ``> `` quote), stacked in any order, keeping the host and rank
they name. A line a terminal wrapped at its width is joined again (and a word it split with padding), and
so is a launcher line a paste broke before its end; a line that holds several messages (a progress bar
with the next log line glued to it, two ranks' lines written into one) is split where each message
starts."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Message:
    """One message of the log: its text without prefixes, where it starts, and who wrote it."""

    line: int
    text: str
    host: str | None = None
    rank: int | None = None  # a global rank a prefix names ([rankN]:, OpenMPI's [job,rank])
    local_rank: int | None = None  # torchrun's [<role><local rank>]:

    @property
    def writer(self) -> tuple[str | None, int | None, int | None]:
        return self.host, self.rank, self.local_rank


_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_HOST_PREFIX = re.compile(r"([A-Za-z0-9][A-Za-z0-9.-]*): ")
_TASK_PREFIX = re.compile(r" {0,3}(\d+): ")
_NUMBERED_PREFIX = re.compile(r"\[(\d+)\] (?=\S)")
# A Markdown quote a paste put before every line ("> " or a bare ">" on an empty line).
_QUOTE_PREFIX = re.compile(r">(?: |$)")
# The end of a name that reads as an exception's: such a name is never a host, and ends a traceback.
EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Warning|Interrupt|Exit|Failure)$")
# Prefixes that name their writer on every line, checked in this order after the host and task label.
_WRITER_PREFIXES = (
    re.compile(r"(?:stdout|stderr): ?"),  # a test harness or wrapper capturing the streams
    re.compile(r"\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr)>: ?"),  # OpenMPI --tag-output: [job,rank]
    re.compile(r"\[rank(?P<rank>\d+)\]: ?"),  # torch >= 2.2: every line of a rank's uncaught exception
    re.compile(r"\[(?!rank\d)[A-Za-z_]+(?P<local_rank>\d+)\]: ?"),  # torchrun --tee: [default0]:
)


def _looks_like_host(token: str) -> bool:
    """pdsh's ``host: `` prefix, told from an exception name or a word followed by a colon: an address, or a
    name with a digit or a hyphen (worker-5, gpu1504, ip-10-0-0-1), or localhost."""
    if token.isdigit() or EXCEPTION_NAME.search(token):
        return False
    return token == "localhost" or any(c.isdigit() or c == "-" for c in token)


def _host_candidates(line: str) -> list[str]:
    """The names that lead a line as pdsh's ``host: `` would, among its other prefixes (a quote, a rank
    marker may come before or after it)."""
    found = []
    while True:
        prefix = next((m for p in (_QUOTE_PREFIX, *_WRITER_PREFIXES) if (m := p.match(line))), None)
        host = _HOST_PREFIX.match(line) if prefix is None else None
        if host and _looks_like_host(host.group(1)):
            found.append(host.group(1))
        elif prefix is None or not prefix.end():
            return found
        line = line[(prefix or host).end() :]


@dataclass(frozen=True)
class PrefixStyle:
    """The log-wide prefixes: which host names pdsh put before lines, and whether Slurm's task labels or a
    viewer's line numbers lead the lines. Decided over the whole log, so that one line starting
    ``RuntimeError: `` or ``3: `` is not taken for a prefix."""

    hosts: frozenset[str]
    task_labels: bool
    numbered: bool
    quoted: bool = False

    @classmethod
    def of(cls, lines: list[str]) -> PrefixStyle:
        tokens = Counter(token for line in lines for token in _host_candidates(line))
        hosts = frozenset(
            t for t, n in tokens.items() if _looks_like_host(t) and (n >= 2 or _IPV4.fullmatch(t))
        )
        tasks = sum(1 for line in lines if _TASK_PREFIX.match(line))
        numbered = sum(1 for line in lines if _NUMBERED_PREFIX.match(line))
        provisional = cls(hosts, tasks >= 2, numbered >= 2, quoted=True)
        quoted = sum(1 for line in lines if "quoted" in provisional.strip(line)[1])
        return cls(hosts, tasks >= 2, numbered >= 2, quoted >= 2)

    def strip(self, line: str) -> tuple[str, dict[str, Any]]:
        """The line without its prefixes, and the writer they name (host, rank, local_rank; ``quoted`` when a
        quote was among them)."""
        writer: dict[str, Any] = {}
        while True:  # prefixes nest: "> worker-5: [rank22]: ..."; each one removed is at least one character
            quote = _QUOTE_PREFIX.match(line) if self.quoted else None
            if quote:
                writer["quoted"], line = True, line[quote.end() :]
                continue
            host = _HOST_PREFIX.match(line)
            if host and host.group(1) in self.hosts:
                writer["host"], line = host.group(1), line[host.end() :]
                continue
            task = _TASK_PREFIX.match(line) if self.task_labels else None
            numbered = _NUMBERED_PREFIX.match(line) if self.numbered else None
            if task or numbered:
                line = line[(task or numbered).end() :]
                continue
            for prefix in _WRITER_PREFIXES:
                found = prefix.match(line)
                if found:
                    writer.update({k: int(v) for k, v in found.groupdict().items() if v is not None})
                    line = line[found.end() :]
                    break
            else:
                return line, writer


# Where a new message starts inside a line: a logger header, a traceback, DeepSpeed's [Rank N] glued to
# what came before, a torch [rankN]: prefix, Python logging's and glog's formats glued to a progress bar.
_GLUE = re.compile(
    r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}[,.]\d+\]"
    r"|Traceback \(most recent call last\):"
    r"|(?<=\S)\[Rank -?\d+\] "
    r"|\[rank\d+\]:"
    r"|(?<=\S)\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[A-Za-z_][\w.]*:"
    r"|(?<=\S)[EWIF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ "
)
# The end of a tqdm bar's counters, "[00:05<00:10, 1.28s/it, loss=5.1]": what follows without a space is
# another message.
_TQDM_END = re.compile(r"\[[\d:?]+<[\d:?]*(?:,[^\[\]]*)?\](?=\S)")


def split_glued(text: str) -> list[str]:
    """A line cut where each of the messages glued into it starts (never at its first character)."""
    cuts = sorted({m.start() for m in _GLUE.finditer(text)} | {m.end() for m in _TQDM_END.finditer(text)})
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    return [p for p in pieces if p.strip()] or [text]


# A line that starts a message of its own: never the continuation of a wrapped line.
_LINE_START = re.compile(
    r"\s|\[|\(|\{|$|[╭│╰]|\d+%\||[EWIF]\d{4} "
    r"|[A-Za-z0-9.-]+: |(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b"
    r"|Traceback|During handling|The above exception|steps: |time \(ms\)|samples/sec|Grad overflow|Reducing |"
    r"Increasing |Current loss scale|Overflow detected|terminate called|what\(\)|NCCL|Killing|Process \d"
)
_WRAP_MIN_WIDTH = 100
# A word a terminal pane wrapped and padded to its width, copied back as one line: "Attempted loss scal" +
# padding + "e: 8192". No format zerogate reads puts 20 spaces between two letters.
_PADDED_WORD = re.compile(r"(?<=[A-Za-z]) {20,}(?=[a-z])")
# Launcher lines a paste often breaks before their end (the command list is long): (where such a line
# starts, what its end holds), joined with the following lines until the end is found.
_OPEN_UNTIL = (
    (re.compile(r"sigkill_handler\]\s*\["), re.compile(r"exits with return code")),
    (re.compile(r"CalledProcessError: Command '"), re.compile(r"returned non-zero exit status")),
    (re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\("), re.compile(r"\)\s*ran for")),
)
_OPEN_UNTIL_LINES = 6


def wrap_width(lines: list[str]) -> int | None:
    """The terminal width a pasted log was wrapped at: the longest line's length, when at least two lines
    have it (no line of a wrapped paste is longer; a wide one is rarely repeated exactly otherwise)."""
    lengths = Counter(len(line) for line in lines if len(line) >= _WRAP_MIN_WIDTH)
    if not lengths:
        return None
    widest = max(lengths)
    return widest if lengths[widest] >= 2 else None


def messages(text: str) -> Iterator[Message]:
    """The log's messages in order (pass 1 of the module docstring)."""
    lines = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    style = PrefixStyle.of(lines)
    width = wrap_width(lines)
    index = 0
    while index < len(lines):
        start = index
        raw = lines[index]
        while (
            width
            and len(lines[index]) == width
            and index + 1 < len(lines)
            and not _LINE_START.match(lines[index + 1])
        ):
            index += 1
            raw += lines[index]
        body, writer = style.strip(_PADDED_WORD.sub("", raw))
        body, index = _join_open_line(body, lines, index)
        index += 1
        for piece in split_glued(body):
            inner, more = style.strip(piece)
            named = {k: v for k, v in {**writer, **more}.items() if k != "quoted"}
            yield Message(line=start + 1, text=inner, **named)


def _join_open_line(body: str, lines: list[str], index: int) -> tuple[str, int]:
    """A launcher line a paste broke before its end, joined with the lines that end it (or left alone)."""
    for opens, closes in _OPEN_UNTIL:
        if not opens.search(body) or closes.search(body):
            continue
        joined = body
        for ahead in range(index + 1, min(index + 1 + _OPEN_UNTIL_LINES, len(lines))):
            if not lines[ahead].strip() or lines[ahead].startswith("["):
                break
            joined += lines[ahead]
            if closes.search(joined):
                return joined, ahead
        break
    return body, index
