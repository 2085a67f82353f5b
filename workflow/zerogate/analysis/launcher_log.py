"""What a launcher log says, read line format by line format: DeepSpeed 0.3 to 0.19, torch's launchers
(``torch.distributed.launch``, torchrun's elastic agent), NCCL's watchdog and the schedulers and shells
around them. :func:`read_events` turns a log's text into event records (kind, rank, step, line,
message, detail), the rows of zerogate.analysis.parse's event table.

The text is read in three passes:

1. **Messages.** Physical lines lose their prefixes (a pdsh host ``10.141.250.231: ``, torch's
   ``[rank6]:``, torchrun's ``[default0]:``, OpenMPI's ``[1,3]<stdout>:``, Slurm's ``12: `` task
   label, a captured ``stderr: ``), keeping the host and rank they name. A line a terminal wrapped at
   its width is joined again (and a word it split with padding), and so is a launcher line a paste broke
   before its end; a line that holds several messages (a progress bar with the next log line glued to
   it, two ranks' lines written into one) is split where each message starts.
2. **Events.** Each message is matched against the formats below (first match wins). Python tracebacks
   are assembled per (host, rank); unprefixed tracebacks that interleave stay apart and say so.
3. **De-duplication.** Every rank of an fp16 run without ZeRO prints its own ``Grad overflow`` and
   ``Reducing dynamic loss scale`` lines, older ZeRO stages print their overflow line on every rank, and
   the engine adds one line per skip: the per-line ``overflow`` events stay as they are, and one
   ``overflow_skip`` event per skipped optimizer step says which lines reported it. A process exit
   reported twice (torch's agent line and its ChildFailedError summary) is one exit.

Where a format cannot tell (which rank an unprefixed line came from, whether identical lines are ranks
or successive steps, a local rank on a multi-node run), the event's detail carries an ``ambiguous``
note instead of a guess. No pandas here: this is the text side of the parser.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

NUMBER = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# Kinds that mean a rank (or the launcher) failed: they never take an attributed step, and
# zerogate.analysis.parse.run_metadata lists each as a failure.
FAILURE_KINDS = (
    "traceback",
    "rank_exit_error",
    "fatal_loss_scale",
    "nccl_timeout",
    "launcher_exit_error",
    "process_abort",
)
# Kinds that mark an optimizer-step boundary: two overflow lines on either side of one are two steps.
STEP_BOUNDARY_KINDS = ("ds_progress", "throughput")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# ---- pass 1: messages ---------------------------------------------------------------------------------


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
_EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Warning|Interrupt|Exit|Failure)$")
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
    if token.isdigit() or _EXCEPTION_NAME.search(token):
        return False
    return token == "localhost" or any(c.isdigit() or c == "-" for c in token)


@dataclass(frozen=True)
class PrefixStyle:
    """The log-wide prefixes: which host names pdsh put before lines, and whether Slurm's task labels or a
    viewer's line numbers lead the lines. Decided over the whole log, so that one line starting
    ``RuntimeError: `` or ``3: `` is not taken for a prefix."""

    hosts: frozenset[str]
    task_labels: bool
    numbered: bool

    @classmethod
    def of(cls, lines: list[str]) -> PrefixStyle:
        tokens = Counter(m.group(1) for line in lines if (m := _HOST_PREFIX.match(line)))
        hosts = frozenset(
            t for t, n in tokens.items() if _looks_like_host(t) and (n >= 2 or _IPV4.fullmatch(t))
        )
        tasks = sum(1 for line in lines if _TASK_PREFIX.match(line))
        numbered = sum(1 for line in lines if _NUMBERED_PREFIX.match(line))
        return cls(hosts, tasks >= 2, numbered >= 2)

    def strip(self, line: str) -> tuple[str, dict[str, Any]]:
        """The line without its prefixes, and the writer they name (host, rank, local_rank)."""
        writer: dict[str, Any] = {}
        while True:  # prefixes nest: "worker-5: [rank22]: ..."; each one removed is at least ": " long
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
            yield Message(line=start + 1, text=inner, **{**writer, **more})


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


# ---- pass 2: events -----------------------------------------------------------------------------------


def _number(text: str | None) -> float | None:
    return None if text is None else float(text)


Built = tuple[int | None, int | None, dict[str, Any]]  # (rank from the message, step, detail)


@dataclass(frozen=True)
class Format:
    """One line format: its event kind, its pattern and how a match becomes (rank, step, detail)."""

    kind: str
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], Built]


def _rank(match: re.Match[str], group: str = "rank") -> int | None:
    value = match.groupdict().get(group)
    return int(value) if value is not None else None


def _progress(m: re.Match[str]) -> Built:
    return _rank(m), int(m["step"]), {"skipped": float(m["skipped"])}


OLD_THROUGHPUT_COUNT = (
    "DeepSpeed before 0.8 prints <epoch>/<count>: the count is the throughput timer's, "
    "micro-steps or optimizer steps depending on the release, so no step is read from it"
)


def _throughput(m: re.Match[str]) -> Built:
    memory = {"mem_allocated_GiB": _number(m["mem"]), "max_mem_allocated_GiB": _number(m["max_mem"])}
    if m["step"] is not None:  # DeepSpeed 0.8 and later
        return (
            None,
            int(m["step"]),
            {
                "epoch": float(m["epoch"]),
                "micro_step": float(m["micro_step"]),
                "running_avg_samples_per_s": float(m["running"]),
                "samples_per_s": float(m["current"]),
                **memory,
            },
        )
    return (
        None,
        None,
        {
            "epoch": float(m["old_epoch"]),
            "timer_count": float(m["old_count"]),
            "running_avg_samples_per_s": float(m["running"] or m["average"]),
            "samples_per_s": _number(m["current"]),
            **memory,
            "ambiguous": OLD_THROUGHPUT_COUNT,
        },
    )


def _pipeline(m: re.Match[str]) -> Built:
    # PipelineEngine (and GPT-NeoX, Megatron-DeepSpeed): the mean over the last steps_per_print steps.
    return (
        None,
        int(m["step"]),
        {"loss": float(m["loss"]), "iter_time_s": float(m["iter"]), "samples_per_s": float(m["samples"])},
    )


def _memory(m: re.Match[str]) -> Built:
    # DeepSpeed's "GB" here is 1024**3 bytes (see_memory_usage divides by 1024**3).
    return (
        None,
        None,
        {
            "ma_GiB": float(m["ma"]),
            "max_ma_GiB": float(m["max_ma"]),
            "ca_GiB": float(m["ca"]),
            "max_ca_GiB": float(m["max_ca"]),
        },
    )


_TIMER = re.compile(rf"\s*(?P<name>[^|:]+?)\s*:\s*(?P<ms>{NUMBER})\s*")


def timers(text: str) -> dict[str, float]:
    """``name: ms`` of every ``|``-separated field of a timer line, names as printed."""
    found = (_TIMER.fullmatch(part) for part in text.split("|"))
    return {m["name"]: float(m["ms"]) for m in found if m}


def _wall_clock(m: re.Match[str]) -> Built:
    return _rank(m), None, timers(m["timers"])


FRAMEWORK_TIMERS_UNMARKED = (
    "no [Rank N] marker and no hyphenated name: a framework's timers, or DeepSpeed's with its log header lost"
)


def _framework_timers(m: re.Match[str]) -> Built:
    # Megatron-LM and GPT-NeoX print their own "time (ms) | forward-compute: ..." lines, without DeepSpeed's
    # [Rank N] marker and with hyphens or spaces in the names DeepSpeed never uses.
    found = timers(m["timers"])
    if not any("-" in name or " " in name for name in found):
        found["ambiguous"] = FRAMEWORK_TIMERS_UNMARKED  # type: ignore[assignment]
    return None, None, found


def _scale_change(m: re.Match[str]) -> Built:
    return _rank(m), None, {"attempted": _number(m["attempted"]), "new": _number(m["new"])}


def _grad_overflow(m: re.Match[str]) -> Built:
    return None, int(m["step"]), {}


def _increase(m: re.Match[str]) -> Built:
    return None, None, {"previous": float(m["previous"]), "new": float(m["new"])}


def _nothing(m: re.Match[str]) -> Built:
    return _rank(m), None, {}


def _exit_code(m: re.Match[str]) -> Built:
    return _rank(m), None, {"code": float(m["code"])}


def _elastic_exit(m: re.Match[str]) -> Built:
    local = int(m["local_rank"])
    return (
        local,
        None,
        {
            "code": float(m["code"]),
            "pid": int(m["pid"]),
            "local_rank": local,
            "source": "torch elastic agent",
        },
    )


def _watchdog(m: re.Match[str]) -> Built:
    fields = {
        "seq": _number(m["seq"]),
        "op": m["op"],
        "timeout_ms": _number(m["timeout"]),
        "ran_for_ms": _number(m["ran_for"]),
    }
    return _rank(m), None, {k: v for k, v in fields.items() if v is not None}


def _world(m: re.Match[str]) -> Built:
    if m["hosts"] is not None:  # WORLD INFO DICT: {'host': [0, 1], ...}: every listed slot
        return None, None, {"world_size": float(len(re.findall(r"\d+", re.sub(r"'[^']*'", "", m["hosts"]))))}
    return None, None, {"world_size": float(m["size"])}


_CONFIG_KEYS = {
    "fp16_enabled",
    "bfloat16_enabled",
    "bf16_enabled",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
}


def _config_value(text: str) -> bool | float | str:
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text)
    except ValueError:
        return text


def _config(m: re.Match[str]) -> Built | None:
    if m["version"] is not None:
        return None, None, {"deepspeed_version": m["version"]}
    if m["precision"] is not None:
        precision = m["precision"].lower()
        return None, None, {"precision": "bf16" if "bf" in precision else "fp16"}
    key = m["key"]
    if key not in _CONFIG_KEYS:
        return None
    return None, None, {"bfloat16_enabled" if key == "bf16_enabled" else key: _config_value(m["value"])}


FORMATS: tuple[Format, ...] = (
    Format(
        "ds_progress",
        re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+)"),
        _progress,
    ),
    Format(
        "throughput",
        re.compile(
            r"(?:epoch=(?P<epoch>\d+)/micro_step=(?P<micro_step>\d+)/global_step=(?P<step>\d+)"
            r"|(?<![\w/])(?P<old_epoch>\d+)/(?P<old_count>\d+)), "
            rf"(?:RunningAvgSamplesPerSec=(?P<running>{NUMBER}), CurrSamplesPerSec=(?P<current>{NUMBER})"
            rf"|SamplesPerSec=(?P<average>{NUMBER}))"
            rf"(?:, MemAllocated=(?P<mem>{NUMBER})GB, MaxMemAllocated=(?P<max_mem>{NUMBER})GB)?"
        ),
        _throughput,
    ),
    Format(
        "throughput",
        re.compile(
            rf"steps: (?P<step>\d+) loss: (?P<loss>{NUMBER}|nan|-?inf)(?: [\w ]+? loss: "
            rf"(?:{NUMBER}|nan|-?inf))*"
            rf" iter time \(s\): (?P<iter>{NUMBER}) samples/sec: (?P<samples>{NUMBER})"
        ),
        _pipeline,
    ),
    Format(
        "memory",
        re.compile(
            rf"MA (?P<ma>{NUMBER}) GB\s+Max_MA (?P<max_ma>{NUMBER}) GB\s+CA (?P<ca>{NUMBER}) GB\s+"
            rf"Max_CA (?P<max_ca>{NUMBER}) GB"
        ),
        _memory,
    ),
    Format(
        "wall_clock",
        re.compile(r"\[Rank (?P<rank>\d+)\] (?:rank=\d+ )?time \(ms\) \|(?P<timers>.*)$"),
        _wall_clock,
    ),
    Format("framework_timers", re.compile(r"(?<!\S)time \(ms\) \|(?P<timers>.*)$"), _framework_timers),
    # The loss scaler of ZeRO and of DeepSpeed 0.8+: rank 0 only; without "Attempted" under bf16. The
    # hysteresis variant skips the step and keeps the scale.
    Format(
        "overflow",
        re.compile(
            rf"OVERFLOW! Rank (?P<rank>\d+) Skipping step\.(?: Attempted loss scale: (?P<attempted>{NUMBER})"
            rf"(?:, reducing to (?P<new>{NUMBER})|, but hysteresis is (?P<hysteresis>\d+))?)?"
        ),
        _scale_change,
    ),
    # ZeRO stages 1 and 2 before the shared loss scaler, printed by every rank.
    Format(
        "overflow",
        re.compile(
            rf"\[deepspeed\] (?:fp16 dynamic loss scale overflow!|OVERFLOW!) Skipping step\. "
            rf"Attempted loss scale: (?P<attempted>{NUMBER}), reducing to (?P<new>{NUMBER})"
        ),
        _scale_change,
    ),
    # The fp16 optimizer without ZeRO: the engine's one line per skip, from rank 0.
    Format(
        "overflow",
        re.compile(
            rf"(?:\[Rank (?P<rank>\d+)\] )?Overflow detected\. Skipping step\. Attempted loss scale: "
            rf"(?P<attempted>{NUMBER}), reducing to (?P<new>{NUMBER})"
        ),
        _scale_change,
    ),
    # ... and every rank's own two lines.
    Format("overflow", re.compile(r"Grad overflow on iteration:?\s*(?P<step>\d+)"), _grad_overflow),
    Format(
        "loss_scale_reduced",
        re.compile(rf"Reducing dynamic loss scale from (?P<attempted>{NUMBER}) to (?P<new>{NUMBER})"),
        _scale_change,
    ),
    Format(
        "loss_scale_increased",
        re.compile(rf"Increasing dynamic loss scale from (?P<previous>{NUMBER}) to (?P<new>{NUMBER})"),
        _increase,
    ),
    Format(
        "fatal_loss_scale",
        re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore"),
        _nothing,
    ),
    Format(
        "nccl_timeout",
        re.compile(
            r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]\s*Watchdog caught collective operation timeout"
            r"(?:: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:[^)]*?Timeout\(ms\)=(?P<timeout>\d+))?"
            r"[^)]*\)(?:\s*ran for (?P<ran_for>\d+) milliseconds)?)?"
        ),
        _watchdog,
    ),
    Format(
        "nccl_timeout",
        re.compile(
            r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]\s*Exception \(either an error or timeout\) detected by "
            r"watchdog "
            r"at work: (?P<seq>\d+)"
        ),
        lambda m: (_rank(m), None, {"seq": float(m["seq"])}),
    ),
    Format("process_abort", re.compile(r"terminate called after throwing an instance of"), _nothing),
    Format(
        "rank_exit_ok", re.compile(r"Process (?P<pid>\d+) exits successfully"), lambda m: (None, None, {})
    ),
    Format(
        "rank_exit_error",
        re.compile(r"--local_rank[= ](?P<rank>\d+)'.*exits with return code = (?P<code>-?\d+)"),
        _exit_code,
    ),
    Format(
        "rank_exit_error",
        re.compile(
            r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local_rank>\d+) \(pid: (?P<pid>\d+)\)"
        ),
        _elastic_exit,
    ),
    Format(
        "world_info",
        re.compile(
            r"dist_world_size=(?P<size>\d+)|WORLD INFO DICT: \{(?P<hosts>[^}]*)\}|\bnranks (?P<size2>\d+)"
        ),
        lambda m: _world(m) if m["size2"] is None else (None, None, {"world_size": float(m["size2"])}),
    ),
    Format(
        "ds_config",
        re.compile(
            r"DeepSpeed info: version=(?P<version>[\w.+-]+)"
            r"|Creating (?P<precision>fp16|bf16|BF16|torch\.float16|torch\.bfloat16)\b.*optimizer"
            r"|\[config\.py:\d+:print\]\s+(?P<key>\w+)\s*\.*\s+(?P<value>\S+)\s*$"
        ),
        _config,
    ),
)

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


# ---- tracebacks ---------------------------------------------------------------------------------------

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
    in
    CamelCase (not a logger's ``WARNING:``, not ``ninja:``), with a message after a colon or a name that
    reads as an exception's."""
    found = _EXCEPTION_LINE.fullmatch(text.rstrip())
    if not found or not found["name"][0].isupper() or found["name"].isupper():
        return False
    return found["colon"] is not None or bool(_EXCEPTION_NAME.search(found["name"]))


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
class _Reader:
    """Pass 2 state: open tracebacks, the ChildFailedError summary being read, the last step announced."""

    multi_node: bool
    events: list[dict[str, Any]] = field(default_factory=list)
    open_tracebacks: dict[tuple, list[_Traceback]] = field(default_factory=dict)
    finished: dict[tuple, tuple[_Traceback, dict[str, Any]]] = field(default_factory=dict)
    last_step: int | None = None
    summary_host: str | None = None
    summary_rank: tuple[int, int] | None = None
    index: int = 0

    def emit(
        self, kind: str, message: Message, rank: int | None, step: int | None, detail: dict[str, Any]
    ) -> dict[str, Any]:
        """One event at the message's line; a line without a step of its own takes the last step announced
        (an attribution, not a measurement), a failure none."""
        if step is not None and kind not in FAILURE_KINDS:
            self.last_step = step
        event = {
            "kind": kind,
            "rank": rank if rank is not None else message.rank,
            "step": None if kind in FAILURE_KINDS else self.last_step,
            "line": message.line,
            "message": message.text.strip(),
            "detail": detail,
            "host": message.host,
            "order": len(self.events),
        }
        self.events.append(event)
        return event

    # -- tracebacks --
    def traceback_line(self, message: Message) -> bool:
        """Feed a message to the tracebacks of its writer; True when it was a traceback's header or frame
        (never an event of its own; the exception line that ends one may be)."""
        key, text = message.writer, message.text
        header = _TRACEBACK_HEADER.search(text)
        if header and (header.start() == 0 or text.startswith("╭")):
            self._open(key, message)
            return True
        opened = self.open_tracebacks.get(key)
        frame = bool(opened) and _is_frame(text)
        if frame:
            opened[-1].frame(message, self.index)
        elif opened and is_exception_line(text):
            self._close(key, message)
        return frame

    def _open(self, key: tuple, message: Message) -> None:
        previous = self.finished.pop(key, None)
        if previous and _CHAIN.match(previous[0].lines[-1]):  # a chained exception: one traceback goes on
            chained, event = previous
            self.events.remove(event)
            chained.frame(message, self.index)
            self.open_tracebacks.setdefault(key, []).append(chained)
            return
        opened = self.open_tracebacks.setdefault(key, [])
        for stale in [t for t in opened if self.index - t.last_seen > _STALE_AFTER]:
            opened.remove(stale)
            self._emit_traceback(stale, stale.last_line, cut_off=True)
        new = _Traceback(key, [message.text], self.index, message.line)
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
        event = self.emit("traceback", Message(line=line, text=traceback.lines[-1]), rank, None, detail)
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

    # -- launcher reports spread over several formats, or naming no rank --
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
            self.emit("rank_exit_error", message, global_rank, None, detail)
        slurm = _SLURM_EXIT.search(text)
        if slurm:
            self.emit(
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
            self.emit(
                "rank_exit_error" if local else "launcher_exit_error",
                message,
                int(local["rank"]) if local else None,
                None,
                detail,
            )
        bare = _EXIT_WITHOUT_RANK.search(text)
        if bare and not _LOCAL_RANK_ARG.search(text):
            self.emit(
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

    def match(self, message: Message) -> None:
        """The first format the message matches; every occurrence of it is an event (two ranks' messages
        written into one line without a break are two)."""
        for fmt in FORMATS:
            built = [b for b in map(fmt.build, fmt.pattern.finditer(message.text)) if b is not None]
            for rank, step, detail in built:
                if fmt.kind == "rank_exit_error" and self.multi_node:  # both line formats print a local rank
                    detail = {**detail, "ambiguous": LOCAL_RANK_ON_SEVERAL_NODES}
                self.emit(fmt.kind, message, rank, step, detail)
            if built:
                return


# ---- pass 3: de-duplication ---------------------------------------------------------------------------


def _merge_exits(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _merge_timeouts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


Signature = tuple[float, float, bool]  # (attempted scale, scale after the skip, whether hysteresis kept it)


@dataclass
class _Skip:
    """One optimizer step the fp16 loss scaler skipped, and the lines that reported it."""

    number: int
    first: dict[str, Any]
    lines: list[int] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    iteration: int | None = None
    signature: Signature | None = None
    boundary: int = 0  # step boundaries seen before its last line
    reported: set[tuple] = field(default_factory=set)  # (kind, names an iteration, rank) of its lines
    repeated: bool = False

    def signature_repeats(self) -> bool:
        """Whether two successive skips could print the same lines: no step named, and no falling scale."""
        return self.iteration is None and (
            self.signature is None or (self.signature[0] == self.signature[1] and not self.signature[2])
        )


REPEATED_SKIP = (
    "identical overflow lines without a rank or a step, at a scale that does not fall: the ranks' "
    "lines of one skip or successive skips at the minimum scale; counted as one"
)


def _evidence(event: dict[str, Any]) -> tuple[int | None, Signature | None]:
    """(the iteration an overflow line names, its scale signature): ``Grad overflow on iteration N`` names
    the one, the lines with scales the other; a bf16 skip names neither."""
    detail = event["detail"]
    if "Grad overflow" in event["message"]:
        return event["step"], None
    if detail.get("attempted") is None:
        return None, None
    hysteresis = detail["new"] is None  # the hysteresis variant: the scale stays
    return None, (detail["attempted"], detail["attempted"] if hysteresis else detail["new"], hysteresis)


def _fits(
    skip: _Skip, reported_by: tuple, iteration: int | None, signature: Signature | None, boundaries: int
) -> bool:
    """Whether an overflow line can be one more report of ``skip``."""
    if iteration is not None and skip.iteration is not None and iteration != skip.iteration:
        return False
    if signature is not None and skip.signature is not None and signature != skip.signature:
        return False
    if reported_by[-1] is not None and reported_by in skip.reported:
        return False  # a rank reports a skip once in each format
    if boundaries > skip.boundary:  # a step went by: only a line naming this very skip belongs to it
        same_step = iteration is not None and iteration == skip.iteration
        same_fall = signature is not None and signature == skip.signature and signature[0] != signature[1]
        return same_step or same_fall
    return True


def skip_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``overflow_skip`` event per optimizer step the loss scaler skipped, from the overflow and
    scale-reduction lines of every rank (see the module docstring)."""
    skips: list[_Skip] = []
    boundaries = 0
    for event in sorted(events, key=lambda e: (e["line"], e["order"])):
        boundaries += event["kind"] in STEP_BOUNDARY_KINDS
        if event["kind"] not in ("overflow", "loss_scale_reduced"):
            continue
        iteration, signature = _evidence(event)
        reported_by = (event["kind"], iteration is not None, event["rank"])
        fitting = [s for s in skips if _fits(s, reported_by, iteration, signature, boundaries)]
        exact = [
            s
            for s in fitting
            if (signature is not None and s.signature == signature)
            or (iteration is not None and s.iteration == iteration)
        ]
        chosen = (exact or fitting)[-1] if fitting else None
        if chosen is None:
            chosen = _Skip(len(skips) + 1, event)
            skips.append(chosen)
        elif (
            event["rank"] is None
            and iteration is None
            and chosen.signature_repeats()
            and signature == chosen.signature
        ):
            chosen.repeated = True
        chosen.lines.append(event["line"])
        chosen.boundary = boundaries
        chosen.reported.add(reported_by)
        if event["rank"] is not None:
            chosen.ranks.add(event["rank"])
        if iteration is not None:
            chosen.iteration = iteration
        if signature is not None:
            chosen.signature = signature
    return [_skip_event(skip) for skip in skips]


def _skip_event(skip: _Skip) -> dict[str, Any]:
    attempted, after, hysteresis = skip.signature if skip.signature else (None, None, False)
    detail: dict[str, Any] = {
        "skip": skip.number,
        "lines": skip.lines,
        "ranks": sorted(skip.ranks),
        "iteration": skip.iteration,
        "attempted": attempted,
        "scale_after": after,
        "hysteresis": hysteresis,
    }
    if skip.repeated:
        detail["ambiguous"] = REPEATED_SKIP
    first = skip.first
    return {
        "kind": "overflow_skip",
        "rank": None,
        "step": skip.iteration if skip.iteration is not None else first["step"],
        "line": first["line"],
        "message": first["message"],
        "detail": detail,
        "order": first["order"] + 0.5,
    }


# ---- the whole reading ----------------------------------------------------------------------------------


def read_events(text: str) -> list[dict[str, Any]]:
    """Every event of a launcher log in line order: dicts with kind, rank, step, line, message and detail
    (a dict), the columns of zerogate.analysis.parse.EVENT_COLUMNS."""
    all_messages = list(messages(text))
    hosts = {m.host for m in all_messages if m.host is not None}
    reader = _Reader(multi_node=len(hosts) > 1)
    for reader.index, message in enumerate(all_messages):
        if reader.traceback_line(message):
            continue
        reader.chain_marker(message)
        reader.launcher_report(message)
        reader.match(message)
    reader.finish()
    events = _merge_timeouts(_merge_exits(reader.events))
    events += skip_events(events)
    events.sort(key=lambda e: (e["line"], e["order"]))
    return [
        {key: event[key] for key in ("kind", "rank", "step", "line", "message", "detail")} for event in events
    ]
