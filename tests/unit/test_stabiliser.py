"""The stabiliser's verdicts, the data-window mapping after rollbacks, fault injection and the events file."""

import json
import math

import numpy as np
import pytest

from zerogate.config.training import StabiliserSettings
from zerogate.contracts.base import read_lines
from zerogate.contracts.records import StabiliserEvent
from zerogate.robust import robust_z
from zerogate.train.stabiliser import EventLog, Stabiliser, data_window, injected_loss_factor


def warmed(policy="skip", history=30, **extra):
    stabiliser = Stabiliser(
        StabiliserSettings(policy=policy, spike_window=64, spike_threshold=6.0, spike_min_history=20, **extra)
    )
    rng = np.random.default_rng(0)
    for loss in 3.0 + 0.05 * rng.standard_normal(history):
        stabiliser.accept(float(loss))
    return stabiliser


def test_robust_z_ignores_one_outlier_in_history_and_refuses_no_spread():
    history = [1.0, 1.1, 0.9, 1.0, 50.0, 1.05, 0.95]
    assert robust_z(1.0, history) == pytest.approx(0.0, abs=0.5)
    assert robust_z(3.0, history) > 6
    assert robust_z(2.0, [1.0] * 10) is None


@pytest.mark.parametrize("policy", ["abort", "skip", "rollback"])
def test_nonfinite_loss_on_any_rank_gets_the_policy(policy):
    verdict = warmed(policy).judge_loss([2.9, float("nan")])
    assert (
        not verdict.ok
        and verdict.kind == "nonfinite_loss"
        and verdict.ranks == [1]
        and verdict.action == policy
    )
    assert warmed(policy).judge_loss([float("inf"), 3.0]).ranks == [0]


def test_spike_is_flagged_only_after_enough_history_and_only_upwards():
    assert warmed(history=30).judge_loss([30.0, 30.0]).kind == "loss_spike"
    assert warmed(history=10).judge_loss([30.0, 30.0]).ok  # too little history to judge
    assert warmed(history=30).judge_loss([0.5, 0.5]).ok  # a sudden drop is not a spike
    assert warmed(history=30).judge_loss([3.02, 2.98]).ok


def test_a_profile_section_is_typed_with_its_defaults():
    assert Stabiliser({"policy": "abort"}).settings == StabiliserSettings(policy="abort")
    assert Stabiliser(None).settings == StabiliserSettings()


def test_rollbacks_turn_into_abort_after_the_limit():
    stabiliser = warmed("rollback", max_rollbacks=2)
    stabiliser.rollbacks = 2
    assert stabiliser.judge_loss([float("nan"), 1.0]).action == "abort"


def test_grad_norm_verdict_and_state_round_trip():
    stabiliser = warmed("skip")
    assert stabiliser.judge_grad_norm(1.5, 2).ok and stabiliser.judge_grad_norm(None, 2).ok
    verdict = stabiliser.judge_grad_norm(float("inf"), 2)
    assert verdict.kind == "nonfinite_grad_norm" and verdict.ranks == [0, 1]
    copy = Stabiliser(stabiliser.settings)
    copy.load_state(json.loads(json.dumps(stabiliser.state())))
    assert list(copy.history) == list(stabiliser.history)


def test_data_window_skips_rolled_back_windows():
    assert [data_window(s, []) for s in range(5)] == [0, 1, 2, 3, 4]
    assert [data_window(s, [2]) for s in range(5)] == [0, 1, 3, 4, 5]
    assert [data_window(s, [3, 2]) for s in range(4)] == [0, 1, 4, 5]


def test_injection_fires_on_its_window_and_rank_only():
    inject = {"step": 5, "rank": 1, "kind": "nan_loss"}
    assert math.isnan(injected_loss_factor(inject, 4, 1))
    assert injected_loss_factor(inject, 4, 0) is None and injected_loss_factor(inject, 5, 1) is None
    assert injected_loss_factor(None, 4, 1) is None
    assert injected_loss_factor({"step": 1, "kind": "loss_spike"}, 0, 0) > 100


def test_events_file_has_step_rank_kind_value_action(tmp_path):
    log = EventLog(tmp_path / "train/events.jsonl")
    log.write(7, warmed("skip").judge_loss([float("nan"), float("nan")]))
    lines = read_lines(StabiliserEvent, log.path)  # every line a StabiliserEvent
    assert [(e.step, e.rank, e.kind, e.action) for e in lines] == [
        (7, 0, "nonfinite_loss", "skip"),
        (7, 1, "nonfinite_loss", "skip"),
    ]
    assert lines[0].value == "nan"  # JSON has no NaN: the value is written as a string
