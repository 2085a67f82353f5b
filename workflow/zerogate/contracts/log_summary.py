"""The judge_log rule's ``results/logs/<name>/log_summary.json``: what one launcher log (zerogate's, or one
from another machine) shows, counted by zerogate.analysis.log_summary, and the gates it can support,
judged by zerogate.analysis.log_gates. The rule's HTML page and the tests read it through this class.

Every count is of what the log shows, never of what a run did: an excerpt that starts late or ends early
shows less. One skipped optimizer step counts once however many ranks or lines report it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.verdicts import JudgedGate


class ExitError(Record):
    """A non-zero exit a launcher or scheduler reported: the rank when the report names one (a local rank
    where the launcher prints only that), and the exit code (negative: killed by that signal)."""

    rank: int | None
    code: int


class FailureLine(Record):
    """A line that shows a failure: where it is, its event kind (zerogate.analysis.parse.EVENT_COLUMNS) and
    its text."""

    line: int | None
    kind: str
    message: str


class RankFailure(Record):
    """A failed rank (None: the failures whose rank the log does not tell), how it failed (traceback, exit,
    watchdog, kill, abort) and the lines that make it so."""

    rank: int | None
    causes: list[str]
    lines: list[FailureLine]


class LogGate(JudgedGate):
    """One gate of the profile as the log can judge it: the same name, claim, metric, comparison and
    threshold,
    the definition of what the log's lines give (not the profile's, which reads zerogate's per-step records),
    and NOT MEASURED with its reason where they give nothing."""

    evidence: dict[str, Any] = Field(default_factory=dict)


class LogSummary(Artefact):
    """What one launcher log shows (see the module docstring), and the gates judged on it."""

    CONTRACT = "log_summary"

    log: str  # the file as given to judge_log
    name: str  # the results directory's name (results/logs/<name>/)
    lines: int
    deepspeed_version: str | None  # as DeepSpeed's "DeepSpeed info: version=" line states it
    precision: str | None  # "fp16", "bf16", "fp32" where the log says; None where it does not
    skipped_steps: int  # optimizer steps the fp16 loss scaler skipped (hysteresis skips included)
    hysteresis_skips: int  # of those, the skips that kept the scale and used up hysteresis
    last_loss_scale: float | None  # the scale the last scale line leaves
    optimizer_steps: int | None  # the highest optimizer step a progress or throughput line names
    # DeepSpeed's own cumulative skipped= at its last progress line, beside (never instead of) skipped_steps:
    # it
    # counts skips before the excerpt starts, and any update a training loop told DeepSpeed to skip.
    progress_skipped: int | None
    progress_lines: int  # DeepSpeed's "[Rank N] step=S, skipped=K"
    wall_clock_lines: int  # DeepSpeed's "[Rank N] time (ms) | ..." (not Megatron's or GPT-NeoX's timers)
    throughput_lines: int  # DeepSpeed's throughput timer, all releases, and the pipeline engine's line
    memory_lines: int  # DeepSpeed's see_memory_usage "MA ... Max_MA ... CA ... Max_CA ..."
    tracebacks: int  # Python tracebacks (a chained exception is one)
    fatal_loss_scale: int  # "Current loss scale already at minimum" aborts
    nccl_timeouts: int  # NCCL watchdog timeouts, one per rank and collective
    failed_ranks: list[int]  # ranks that failed (zerogate.analysis.failure_attribution)
    exit_errors: list[ExitError]
    world_size: int | None  # as the launcher or NCCL states it
    ambiguities: list[str]  # what the formats could not tell, once each
    gates: list[LogGate]
    failures: list[RankFailure] = Field(default_factory=list)  # each failed rank with its lines
