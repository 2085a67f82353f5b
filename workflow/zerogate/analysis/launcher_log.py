"""What a launcher log says, read line format by line format: DeepSpeed 0.3 to 0.19, torch's launchers
(``torch.distributed.launch``, torchrun's elastic agent), NCCL's watchdog and the schedulers and shells
around them. :func:`read_events` turns a log's text into event records (kind, rank, step, line,
message, detail), the rows of zerogate.analysis.parse's event table.

The text is read in three passes:

1. **Messages** (zerogate.analysis.launcher_messages): physical lines lose the prefixes launchers and
   schedulers add, keeping the host and rank they name; wrapped and broken lines are joined again, glued
   messages split.
2. **Events.** Each message is matched against the formats below (:data:`FORMATS`, first match wins).
   Python tracebacks are read by zerogate.analysis.launcher_tracebacks, the launchers' exit reports by
   zerogate.analysis.launcher_failures.
3. **De-duplication.** A failure reported twice is one (zerogate.analysis.launcher_failures); the
   per-line ``overflow`` events stay as they are, and zerogate.analysis.launcher_skips adds one
   ``overflow_skip`` event per optimizer step the fp16 loss scaler skipped.

Which rank each failure event is about is decided afterwards, from the events alone, by
zerogate.analysis.failure_attribution.

Where a format cannot tell (which rank an unprefixed line came from, whether identical lines are ranks
or successive steps, a local rank on a multi-node run), the event's detail carries an ``ambiguous``
note instead of a guess. No pandas here: this is the text side of the parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerogate.analysis.launcher_events import WATCHDOG_KINDS, EventLog
from zerogate.analysis.launcher_failures import (
    LOCAL_RANK_ON_SEVERAL_NODES,
    ExitReader,
    merge_exits,
    merge_timeouts,
)
from zerogate.analysis.launcher_messages import Message, messages
from zerogate.analysis.launcher_skips import skip_events
from zerogate.analysis.launcher_tracebacks import TracebackReader

NUMBER = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


# ---- the line formats ---------------------------------------------------------------------------------


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


def _watchdog_seq(m: re.Match[str]) -> Built:
    return _rank(m), None, {"seq": float(m["seq"])}


def _watchdog_failure(m: re.Match[str]) -> Built:
    """A rank's watchdog reporting a failure that names no collective; a dump signal from another rank's
    timeout names that rank (the one whose watchdog timed out), the reporting one in ``reported_by``."""
    if m.groupdict().get("source") is not None:
        return int(m["source"]), None, {"reported_by": _rank(m)}
    return _rank(m), None, {}


def _partitions(m: re.Match[str]) -> Built:
    # ZeRO stages 1 and 2 print their partition count per parameter group: the data-parallel ranks.
    counts = [int(c) for c in re.findall(r"\d+", m["partitions"])]
    return None, None, {"processes": float(max(counts)), "source": "ZeRO partition count"}


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


# torch's rank marker in NCCL lines: "[Rank 6]", "[PG 1 Rank 3]", "[PG ID 0 PG GUID 0(default_pg) Rank 2]".
_PG_RANK = r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]"

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
            rf"{_PG_RANK}\s*Watchdog caught collective operation timeout"
            r"(?:: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:[^)]*?Timeout\(ms\)=(?P<timeout>\d+))?"
            r"[^)]*\)(?:\s*ran for (?P<ran_for>\d+) milliseconds)?)?"
        ),
        _watchdog,
    ),
    # The watchdog's report of the same collective: torch 2.3-2.6, torch 2.7 and later, the abort path.
    Format(
        "nccl_timeout",
        re.compile(
            rf"{_PG_RANK}\s*(?:Exception \(either an error or timeout\) detected by watchdog at work: "
            r"|failure detected by watchdog at work sequence id: |Timeout at NCCL work: )(?P<seq>\d+)"
        ),
        _watchdog_seq,
    ),
    # Newer torch's watchdog failures that name no collective; a rank signalling the dump for its own
    # failure; the heartbeat monitor finding the watchdog stuck; the abort after the dump.
    Format(
        "watchdog_failure",
        re.compile(
            rf"{_PG_RANK}\s*(?:\[PG [^\]]*\]\s*)?(?:First PG on this rank to signal dumping"
            r"|ProcessGroupNCCL's watchdog got stuck"
            r"|Received a dump signal due to a collective timeout from "
            r"(?:this local rank|\s*rank (?P<source>\d+))"
            r"|Terminating the process after attempting to dump debug info"
            r"|Some NCCL operations have failed or timed out)"
        ),
        _watchdog_failure,
    ),
    Format(
        "watchdog_failure",
        re.compile(r"Stack trace of the failed collective|Some NCCL operations have failed or timed out"),
        _nothing,
    ),
    Format("process_abort", re.compile(r"terminate called after throwing an instance of"), _nothing),
    Format(
        "rank_exit_ok", re.compile(r"Process (?P<pid>\d+) exits successfully"), lambda m: (None, None, {})
    ),
    Format(
        "launcher_kill",
        re.compile(r"Killing subprocess (?P<pid>\d+)"),
        lambda m: (None, None, {"pid": int(m["pid"])}),
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
    Format("processes", re.compile(r"partition count \[(?P<partitions>[\d, ]+)\]"), _partitions),
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


# ---- the whole reading ----------------------------------------------------------------------------------


def _watchdog_rank(message: Message, rank: int | None, detail: dict[str, Any]) -> int | None:
    """The global rank a watchdog line is about: the ``[rankN]:`` prefix torch puts before it, where it has
    one, over the rank in the process group the line names (``group_rank`` in the detail when they differ);
    a dump signal from another rank's timeout stays that rank's."""
    if message.rank is None or rank == message.rank or "reported_by" in detail:
        return rank
    if rank is not None:
        detail["group_rank"] = rank
    return message.rank


def _match(log: EventLog, message: Message, multi_node: bool) -> None:
    """The first format the message matches; every occurrence of it is an event (two ranks' messages
    written into one line without a break are two)."""
    for fmt in FORMATS:
        built = [b for b in map(fmt.build, fmt.pattern.finditer(message.text)) if b is not None]
        for rank, step, detail in built:
            if fmt.kind == "rank_exit_error" and multi_node:  # torch elastic's agent prints a local rank
                detail = {**detail, "ambiguous": LOCAL_RANK_ON_SEVERAL_NODES}
            if fmt.kind in WATCHDOG_KINDS:
                rank = _watchdog_rank(message, rank, detail)
            log.emit(fmt.kind, message, rank, step, detail)
        if built:
            return


SEVERAL_HOSTS = "pdsh host prefixes: one node each, so at least as many processes"


def _emit_nodes(log: EventLog, all_messages: list[Message]) -> None:
    """A ``processes`` event where a log's second host first writes: several nodes, several processes."""
    hosts: list[str] = []
    for message in all_messages:
        if message.host is not None and message.host not in hosts:
            hosts.append(message.host)
            if len(hosts) == 2:
                log.emit("processes", message, None, None, {"processes": 2.0, "source": SEVERAL_HOSTS})
                return


def read_events(text: str) -> list[dict[str, Any]]:
    """Every event of a launcher log in line order: dicts with kind, rank, step, line, message and detail
    (a dict), the columns of zerogate.analysis.parse.EVENT_COLUMNS."""
    all_messages = list(messages(text))
    multi_node = len({m.host for m in all_messages if m.host is not None}) > 1
    log = EventLog()
    tracebacks = TracebackReader(log)
    exits = ExitReader(log, tracebacks, multi_node)
    for index, message in enumerate(all_messages):
        if tracebacks.feed(message, index):
            continue
        tracebacks.chain_marker(message)
        exits.read(message)
        _match(log, message, multi_node)
    tracebacks.finish()
    if multi_node:
        _emit_nodes(log, all_messages)
    events = merge_timeouts(merge_exits(log.events))
    events += skip_events(events)
    events.sort(key=lambda e: (e["line"], e["order"]))
    return [
        {key: event[key] for key in ("kind", "rank", "step", "line", "message", "detail")} for event in events
    ]
