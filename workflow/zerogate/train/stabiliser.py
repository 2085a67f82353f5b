"""The loss stabiliser: judge each optimizer step before its update is applied, and say what to do.

Pure logic, no torch.distributed: the training loop hands in every rank's window loss (all ranks learn
all of them from the one all-reduce the loop already does per optimizer step), and gets back a verdict.
Policies: ``abort`` (stop with the step), ``skip`` (drop the update and the batch), ``rollback``
(restore the last good checkpoint and skip the offending data window).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zerogate.config.training import StabiliserSettings, stabiliser_settings
from zerogate.contracts.base import line_of
from zerogate.contracts.records import StabiliserEvent
from zerogate.robust import robust_z


@dataclass
class Verdict:
    ok: bool
    kind: str | None = None  # "nonfinite_loss" | "nonfinite_grad_norm" | "loss_spike"
    value: float | None = None
    ranks: list[int] = field(default_factory=list)  # where it was seen
    action: str = "apply"  # "apply" | "abort" | "skip" | "rollback"


class Stabiliser:
    """Keeps the rolling loss history; judges each step's loss before the update."""

    def __init__(self, settings: StabiliserSettings | dict[str, Any] | None) -> None:
        """``settings``: typed, or the profile's ``stabiliser`` section (defaults from
        zerogate.config.training)."""
        self.settings = (
            settings if isinstance(settings, StabiliserSettings) else stabiliser_settings(settings)
        )
        self.history: deque[float] = deque(maxlen=self.settings.spike_window)
        self.rollbacks = 0
        self.skipped_steps = 0

    def _action(self) -> str:
        policy = self.settings.policy
        if policy == "rollback" and self.rollbacks >= self.settings.max_rollbacks:
            return "abort"  # a fault that survives every rollback would otherwise loop forever
        return policy

    def judge_loss(self, rank_losses: list[float]) -> Verdict:
        """Verdict on the window losses of every rank (index = rank), before the optimizer step."""
        bad = [rank for rank, loss in enumerate(rank_losses) if not math.isfinite(loss)]
        if bad:
            return Verdict(False, "nonfinite_loss", float(rank_losses[bad[0]]), bad, self._action())
        loss = float(np.mean(rank_losses))
        if len(self.history) >= self.settings.spike_min_history:
            z = robust_z(loss, list(self.history))
            if z is not None and z > self.settings.spike_threshold:
                return Verdict(False, "loss_spike", loss, list(range(len(rank_losses))), self._action())
        return Verdict(True, value=loss)

    def judge_grad_norm(self, grad_norm: float | None, world: int) -> Verdict:
        """After the step: DeepSpeed's ZeRO optimizers compute the norm inside step() and drop the update
        themselves when it is not finite (stage3.step: is_invalid_grad_norm), so only the policy's
        abort or rollback is left to do."""
        if grad_norm is None or math.isfinite(grad_norm):
            return Verdict(True, value=grad_norm)
        return Verdict(False, "nonfinite_grad_norm", float(grad_norm), list(range(world)), self._action())

    def accept(self, loss: float) -> None:
        """A step whose update was applied: its loss joins the history."""
        self.history.append(float(loss))

    def state(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "rollbacks": self.rollbacks,
            "skipped_steps": self.skipped_steps,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.history = deque(state["history"], maxlen=self.settings.spike_window)
        self.rollbacks, self.skipped_steps = state["rollbacks"], state["skipped_steps"]


def data_window(step: int, skipped_windows: list[int]) -> int:
    """The data window (0-based) that optimizer step ``step`` (0-based) trains on: the step-th window not
    skipped by a rollback. Without rollbacks it is the step itself, so data order stays a function of
    the step (and of the skipped windows, which checkpoints carry)."""
    window = step
    for skipped in sorted(skipped_windows):
        if skipped <= window:
            window += 1
    return window


def injected_loss_factor(inject: dict[str, Any] | None, window: int, rank: int) -> float | None:
    """The factor that poisons this window's loss on this rank (fault injection), or None.

    Keyed on the data window, not the step: a rollback skips the window, so the fault does not recur."""
    if not inject or inject["kind"] not in ("nan_loss", "loss_spike"):
        return None
    if inject["step"] - 1 != window or inject.get("rank", 0) != rank:
        return None
    return float("nan") if inject["kind"] == "nan_loss" else 1000.0


class EventLog:
    """train/events.jsonl: one line per stabiliser event (step, rank, kind, value, action)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, verdict: Verdict) -> None:
        value = verdict.value if verdict.value is None or math.isfinite(verdict.value) else str(verdict.value)
        with open(self.path, "a") as handle:
            for rank in verdict.ranks:
                event = StabiliserEvent(
                    step=step, rank=rank, kind=verdict.kind, value=value, action=verdict.action
                )
                handle.write(line_of(event) + "\n")
