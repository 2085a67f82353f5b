import json
from pathlib import Path

import pytest

from tests.unit.helpers import spike_rule, synthetic_steps
from zerogate.analysis import measures
from zerogate.analysis.gates import FAIL, NOT_MEASURED, evaluate_gate
from zerogate.analysis.parse import event_table, parse_launcher_log, read_rank_metrics, run_metadata

DATA = Path(__file__).resolve().parents[1] / "data"


def test_real_cpu_log_has_clean_exits_and_no_failures():
    events = parse_launcher_log((DATA / "deepspeed_0.19.8_cpu_fp32_zero3.log").read_text())
    kinds = events["kind"].tolist()
    assert kinds.count("rank_exit_ok") == 2
    assert not {"traceback", "rank_exit_error", "overflow", "fatal_loss_scale"} & set(kinds)


def test_fp16_overflow_lines_in_both_wordings():
    events = parse_launcher_log((DATA / "deepspeed_fp16_overflow.log").read_text())
    progress = events[events["kind"] == "ds_progress"]
    assert progress["step"].tolist() == [10, 20]
    assert [json.loads(d)["skipped"] for d in progress["detail"]] == [2, 4]
    overflow = events[events["kind"] == "overflow"]
    assert len(overflow) == 3  # the hysteresis variant skips a step too, keeping the scale
    assert json.loads(overflow.iloc[0]["detail"]) == {"attempted": 65536.0, "new": None}
    assert json.loads(overflow.iloc[1]["detail"]) == {"attempted": 65536.0, "new": 32768.0}
    assert overflow.iloc[2]["step"] == 12
    reduced = events[events["kind"] == "loss_scale_reduced"]
    assert json.loads(reduced.iloc[0]["detail"]) == {"attempted": 8192.0, "new": 4096.0}


def test_crashed_rank_is_reported_with_its_traceback():
    events = parse_launcher_log((DATA / "deepspeed_fp16_overflow.log").read_text())
    crash = events[events["kind"] == "traceback"].iloc[0]
    assert crash["rank"] == 0 and "minimum" in crash["message"]
    assert "engine.step()" in crash["detail"]
    assert (events["kind"] == "fatal_loss_scale").sum() == 1
    exit_error = events[events["kind"] == "rank_exit_error"].iloc[0]
    assert exit_error["rank"] == 0 and json.loads(exit_error["detail"]) == {"code": 1.0}


def test_rank_metrics_are_read_sorted_with_nan_kept(tmp_path):
    (tmp_path / "rank1.jsonl").write_text('{"step": 1, "rank": 1, "loss": NaN}\n')
    (tmp_path / "rank0.jsonl").write_text('{"step": 2, "rank": 0, "loss": 1.5}\n{"step": 1, "rank": 0, "loss": 2.0}\n')
    frame = read_rank_metrics(tmp_path)
    assert list(zip(frame["rank"], frame["step"])) == [(0, 1), (0, 2), (1, 1)]
    assert frame["loss"].isna().iloc[2]


def test_malformed_metrics_line_names_file_and_line(tmp_path):
    (tmp_path / "rank0.jsonl").write_text('{"step": 1}\n{"step": \n')
    with pytest.raises(ValueError, match=r"rank0.jsonl: line 2"):
        read_rank_metrics(tmp_path)


def test_real_wall_clock_breakdown_lines_become_timer_columns():
    # Captured with the smoke profile plus "wall_clock_breakdown": true (DeepSpeed 0.19.8, CPU, fp32).
    events = parse_launcher_log((DATA / "deepspeed_0.19.8_cpu_fp32_wall_clock.log").read_text())
    timers = event_table(events, "wall_clock")
    micro = timers[timers["fwd_microstep"].notna()]
    assert len(micro) == 12 * 8  # one line per micro-step, rank 0 only
    assert {"bwd_microstep", "step_microstep"} <= set(micro.columns) and (micro["fwd_microstep"] > 0).all()
    per_step = timers[timers["fwd"].notna()]  # DeepSpeed's abbreviated per-optimizer-step line
    assert len(per_step) == 12 and (per_step["bwd"] > 0).all() and (timers["rank"] == 0).all()
    assert (events["kind"] == "rank_exit_ok").sum() == 2


HAND_BUILT = """\
[2026-11-29 10:00:01,000] [INFO] [logging.py:107:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]
[2026-11-29 10:00:01,001] [INFO] [timer.py:264:stop] epoch=0/micro_step=80/global_step=10, RunningAvgSamplesPerSec=58.73, CurrSamplesPerSec=61.35, MemAllocated=6.01GB, MaxMemAllocated=19.52GB
[2026-11-29 10:00:01,002] [INFO] [utils.py:781:see_memory_usage] MA 6.01 GB         Max_MA 19.52 GB         CA 20.1 GB         Max_CA 21 GB
[2026-11-29 10:00:01,003] [INFO] [logging.py:107:log_dist] [Rank 0] time (ms) | forward_microstep: 412.50 | backward_microstep: 930.10 | step_microstep: 5.20
"""


def test_throughput_memory_and_named_wall_clock_lines():
    events = parse_launcher_log(HAND_BUILT)
    assert events["kind"].tolist() == ["ds_progress", "throughput", "memory", "wall_clock"]
    throughput = json.loads(events.iloc[1]["detail"])
    assert throughput["samples_per_s"] == 61.35 and throughput["max_mem_allocated_GiB"] == 19.52
    assert events.iloc[1]["step"] == 10
    assert json.loads(events.iloc[2]["detail"]) == {"ma_GiB": 6.01, "max_ma_GiB": 19.52, "ca_GiB": 20.1, "max_ca_GiB": 21.0}
    assert events.iloc[2]["step"] == 10  # attributed to the last announced step
    assert json.loads(events.iloc[3]["detail"]) == {"forward_microstep": 412.5, "backward_microstep": 930.1,
                                                    "step_microstep": 5.2}


def test_real_killed_rank_log_is_a_failure_with_its_last_lines(tiny_profile):
    # Captured: smoke profile, rank 1 killed with SIGKILL after 3 steps; rank 0 then died in gloo.
    text = (DATA / "deepspeed_0.19.8_cpu_fp32_rank1_killed.log").read_text()
    events = parse_launcher_log(text)
    exit_error = events[events["kind"] == "rank_exit_error"].iloc[0]
    assert exit_error["rank"] == 1 and json.loads(exit_error["detail"]) == {"code": -9.0}
    steps = synthetic_steps(steps=3)
    meta = run_metadata(steps, events, None, text, expected_steps=12)
    assert meta["failed_ranks"] == [0, 1] and not meta["finished"]
    traceback = next(f for f in meta["failures"] if f["kind"] == "traceback")
    assert "Connection reset by peer" in traceback["message"] and len(traceback["last_lines"]) > 3
    gate = next(g for g in tiny_profile["gates"] if g["name"] == "ranks_completed")
    result = evaluate_gate(gate, steps, events, None, {}, 1, 12, spike_rule(tiny_profile), run_meta=meta)
    assert result["verdict"] == FAIL and result["measured"] == 2
    assert "rank 0 failed: RuntimeError" in result["reason"]
    assert result["evidence"]["failures"][0]["last_lines"]


def test_training_loop_skip_reasons_become_overflow_flags_only_under_a_loss_scaler(tiny_profile):
    # What zerogate.train.loop writes: skip_reason per step, DeepSpeed's cumulative counter (which also counts
    # the stabiliser's dropped updates) and the loss scale, null without fp16. Only skip_reason counts.
    steps = synthetic_steps(steps=5, ranks=1)
    steps["skip_reason"] = [None, "fp16_overflow", None, "nonfinite_loss", None]
    steps["skipped_steps_deepspeed"] = [0, 1, 1, 2, 2]
    steps["loss_scale"] = [65536.0, 32768.0, 32768.0, 32768.0, 32768.0]
    assert measures.overflow_skipped(steps).tolist() == [False, True, False, False, False]
    assert "overflow_skipped" not in read_back(steps).columns  # parsing derives nothing: one source
    steps["loss_scale"] = None  # fp32: no loss scaler, nothing to count
    assert measures.overflow_skipped(steps) is None
    gate = next(g for g in tiny_profile["gates"] if g["name"] == "overflow_skip_fraction")
    result = evaluate_gate(gate, steps, parse_launcher_log(""), None, {}, 1, 5, spike_rule(tiny_profile), world_size=1,
                           ds_config={"fp16": {"enabled": False}})
    assert result["verdict"] == NOT_MEASURED and "no fp16 loss scaler" in result["reason"]


def read_back(steps, tmp=None):
    """The steps as parse_logs reads them from the ranks' JSON lines."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        for rank, group in steps.groupby("rank"):
            Path(directory, f"rank{rank}.jsonl").write_text(group.to_json(orient="records", lines=True))
        return read_rank_metrics(directory)
