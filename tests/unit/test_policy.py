"""The per-step policy the loop asks: apply, skip, roll back or abort; and the fault injector."""

import math

import pytest

from zerogate.config.training import StabiliserSettings
from zerogate.contracts.base import read_lines
from zerogate.contracts.records import OVERFLOW_REASON, StabiliserEvent
from zerogate.train.policy import FaultInjector, StabiliserAbort, StepPolicy, skip_reason
from zerogate.train.stabiliser import EventLog, Stabiliser, Verdict


def policy_for(tmp_path, policy, fp16=False, **extra):
    stabiliser = Stabiliser(StabiliserSettings(policy=policy, **extra))
    return StepPolicy(stabiliser, EventLog(tmp_path / "events.jsonl"), rank=0, fp16=fp16), stabiliser


def test_a_good_step_continues_without_an_event(tmp_path):
    policy, stabiliser = policy_for(tmp_path, "skip")
    verdict = policy.before_update([1.0, 1.2])
    assert verdict.ok and policy.settle(1, policy.after_update(verdict, 0.5, 2)) == policy.CONTINUE
    assert stabiliser.skipped_steps == 0 and not (tmp_path / "events.jsonl").exists()


def test_skip_counts_and_logs_then_continues(tmp_path):
    policy, stabiliser = policy_for(tmp_path, "skip")
    verdict = policy.before_update([1.0, float("nan")])
    assert not verdict.ok and policy.settle(7, verdict) == policy.CONTINUE
    assert stabiliser.skipped_steps == 1
    (event,) = read_lines(StabiliserEvent, tmp_path / "events.jsonl")
    assert event.step == 7 and event.rank == 1 and event.action == "skip"
    assert skip_reason(verdict, applied=False) == "nonfinite_loss"


def test_rollback_asks_the_loop_to_roll_back_and_abort_raises(tmp_path):
    policy, _ = policy_for(tmp_path, "rollback", max_rollbacks=1)
    assert policy.settle(3, policy.before_update([float("inf")])) == policy.ROLLBACK
    with pytest.raises(StabiliserAbort, match="step 4"):
        policy.no_checkpoint(4, Verdict(False, "nonfinite_loss", math.inf, [0], "rollback"))
    aborting, _ = policy_for(tmp_path, "abort")
    with pytest.raises(StabiliserAbort):
        aborting.settle(5, aborting.before_update([float("nan")]))


def test_a_nonfinite_grad_norm_is_a_fault_in_fp32_but_an_overflow_in_fp16(tmp_path):
    fp32, _ = policy_for(tmp_path, "skip")
    assert fp32.after_update(Verdict(True, value=1.0), math.inf, 2).kind == "nonfinite_grad_norm"
    fp16, _ = policy_for(tmp_path, "skip", fp16=True)
    verdict = fp16.after_update(Verdict(True, value=1.0), math.inf, 2)
    assert verdict.ok and skip_reason(verdict, applied=False) == OVERFLOW_REASON == "fp16_overflow"
    assert skip_reason(verdict, applied=True) is None


def test_fault_injection_poisons_only_the_chosen_window_rank_and_first_micro_batch():
    injector = FaultInjector({"step": 3, "kind": "nan_loss", "rank": 1}, rank=1)
    assert math.isnan(injector.poison(2.0, window=2, micro=0))
    assert injector.poison(2.0, window=2, micro=1) == 2.0 and injector.poison(2.0, window=3, micro=0) == 2.0
    assert FaultInjector({"step": 3, "kind": "nan_loss", "rank": 1}, rank=0).poison(2.0, 2, 0) == 2.0
    assert FaultInjector({"step": 1, "kind": "loss_spike"}, rank=0).poison(2.0, 0, 0) == 2000.0
    assert FaultInjector(None, rank=0).poison(2.0, 0, 0) == 2.0
