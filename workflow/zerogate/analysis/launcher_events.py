"""The events a launcher log yields (zerogate.analysis.launcher_log), in the order they are read: the kinds
that mean a failure or an optimizer-step boundary, and the step a line without one of its own is
attributed to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerogate.analysis.launcher_messages import Message

# Kinds that report a failure (a rank's or the launcher's): they never take an attributed step;
# zerogate.analysis.failure_attribution decides which rank each one is about.
FAILURE_KINDS = (
    "traceback",
    "rank_exit_error",
    "fatal_loss_scale",
    "nccl_timeout",
    "launcher_exit_error",
    "process_abort",
    "watchdog_failure",
    "launcher_kill",
)
# The NCCL watchdog's kinds: a timeout of a named collective, and the failures that name none.
WATCHDOG_KINDS = ("nccl_timeout", "watchdog_failure")
# Kinds that mark an optimizer-step boundary: two overflow lines on either side of one are two steps.
STEP_BOUNDARY_KINDS = ("ds_progress", "throughput")


@dataclass
class EventLog:
    """The events read so far, in reading order, and the last step a line announced."""

    events: list[dict[str, Any]] = field(default_factory=list)
    last_step: int | None = None

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
