"""What the training loop does with each optimizer step, decided outside the hot loop.

The loop computes a window's losses and asks :class:`StepPolicy`: apply the update or drop it; after
the update, whether the gradient norm makes the step a fault; then whether the run continues, rolls
back or aborts. Fault injection (config, off by default) is :class:`FaultInjector`; the checkpoint and
evaluation cadences are zerogate.config.training.CheckpointSettings.due and EvaluationSettings.interval.
Pure logic apart from the prints: tested without DeepSpeed (tests/unit/test_policy.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerogate.train.stabiliser import EventLog, Stabiliser, Verdict, injected_loss_factor


class StabiliserAbort(SystemExit):
    pass


@dataclass
class FaultInjector:
    """The profile's ``stabiliser.inject`` (tests only): poisons one data window's loss on one rank
    (``nan_loss``, ``loss_spike``), or makes one rank a straggler (``slow``)."""

    inject: dict[str, Any] | None
    rank: int

    def delay_s(self, step: int) -> float:
        """Seconds the ``slow`` injection adds to each micro-step of optimizer step ``step`` (0-based) on this
        rank: ``seconds`` from step ``inject.step`` (1-based, default 1) on, else 0."""
        inject = self.inject
        if not inject or inject["kind"] != "slow" or inject.get("rank", 0) != self.rank:
            return 0.0
        return float(inject["seconds"]) if step + 1 >= inject.get("step", 1) else 0.0

    def slow_down(self, step: int) -> None:
        """A slower rank, simulated: the extra time is spent on the host, outside any collective, so the other
        ranks wait for it at the next one (as they would for a slower card)."""
        delay = self.delay_s(step)
        if delay:
            time.sleep(delay)

    def poison(self, loss: Any, window: int, micro: int) -> Any:
        """``loss`` as trained: multiplied by NaN (or 1000) on the first micro-batch of the chosen window."""
        factor = injected_loss_factor(self.inject, window, self.rank) if micro == 0 else None
        return loss if factor is None else loss * factor


class StepPolicy:
    """The stabiliser's verdicts turned into actions: apply, skip, roll back or abort."""

    CONTINUE, ROLLBACK = "continue", "rollback"

    def __init__(
        self,
        stabiliser: Stabiliser,
        events: EventLog,
        rank: int,
        fp16: bool,
        barrier: Callable[[], None] = lambda: None,
    ) -> None:
        self.stabiliser, self.events, self.rank, self.fp16 = stabiliser, events, rank, fp16
        self.barrier = barrier

    def before_update(self, rank_losses: list[float]) -> Verdict:
        """Judged on every rank's window loss before the update: a bad loss never reaches the weights."""
        return self.stabiliser.judge_loss(rank_losses)

    def after_update(self, verdict: Verdict, grad_norm: float | None, world: int) -> Verdict:
        """Under fp16 a non-finite norm is the loss scaler's overflow, a normal skipped step (DeepSpeed drops
        it and the record says fp16_overflow); in fp32/bf16 it is a fault, already dropped by DeepSpeed's
        ZeRO optimizer, so only the policy's abort or rollback is left to do."""
        if verdict.ok and not self.fp16:
            norm_verdict = self.stabiliser.judge_grad_norm(grad_norm, world)
            if not norm_verdict.ok:
                return norm_verdict
        return verdict

    def settle(self, step: int, verdict: Verdict) -> str:
        """After a judged step (``step`` 1-based): CONTINUE (applied or skipped) or ROLLBACK; abort raises."""
        if verdict.ok:
            return self.CONTINUE
        self.stabiliser.skipped_steps += 1
        self.report(step, verdict)
        return self.CONTINUE if verdict.action == "skip" else self.ROLLBACK

    def report(self, step: int, verdict: Verdict) -> None:
        """Log a stabiliser event; stop the run if the action is abort."""
        print(
            f"zerogate: stabiliser: step {step}: {verdict.kind} = {verdict.value} on ranks {verdict.ranks}: "
            f"{verdict.action}",
            file=sys.stderr,
        )
        if self.rank == 0:
            self.events.write(step, verdict)
        if verdict.action == "abort":
            self.barrier()
            raise StabiliserAbort(
                f"zerogate: stabiliser aborted the run at step {step}: {verdict.kind} "
                f"({verdict.value}) on ranks {verdict.ranks}"
            )

    def no_checkpoint(self, step: int, verdict: Verdict) -> None:
        """A rollback with nothing to roll back to ends the run as an abort."""
        self.report(step, Verdict(False, verdict.kind, verdict.value, verdict.ranks, "abort"))


def skip_reason(verdict: Verdict, applied: bool) -> str | None:
    """Why a step's update was not applied: the stabiliser's finding, else DeepSpeed's fp16 overflow."""
    return None if applied else (verdict.kind or "fp16_overflow")
