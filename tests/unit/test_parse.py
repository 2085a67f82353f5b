import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import (
    judged_gate,
    settings,
    spike_rule,
    step_record,
    synthetic_steps,
    table_of,
    train_summary,
)
from zerogate.analysis import measures
from zerogate.analysis.health import record_completeness
from zerogate.analysis.launcher_failures import LAST_STARTED
from zerogate.analysis.parse import (
    STEP_COLUMNS,
    event_table,
    parse_launcher_log,
    read_rank_metrics,
    run_metadata,
)
from zerogate.contracts.base import ContractError, write_lines
from zerogate.contracts.parsed import ProgressSkips
from zerogate.contracts.records import StabiliserEvent
from zerogate.contracts.run import DsConfig
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED

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
    assert str(events["line"].dtype) == str(events["rank"].dtype) == "Int64"
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
    assert exit_error["rank"] == 0 and json.loads(exit_error["detail"]) == {
        "code": 1.0,
        "started_local_ranks": 1,
    }


def test_rank_metrics_are_read_sorted_with_nan_kept(tmp_path):
    write_lines(tmp_path / "rank1.jsonl", [step_record(step=1, rank=1, loss=float("nan"))])
    write_lines(
        tmp_path / "rank0.jsonl",
        [step_record(step=2, rank=0, loss=1.5), step_record(step=1, rank=0, loss=2.0)],
    )
    frame = read_rank_metrics(tmp_path)
    assert list(zip(frame["rank"], frame["step"])) == [(0, 1), (0, 2), (1, 1)]
    assert frame["loss"].isna().iloc[2] and not frame["loss_finite"].iloc[2]
    assert list(frame.columns) == list(STEP_COLUMNS)


def test_malformed_metrics_line_names_file_and_line(tmp_path):
    write_lines(tmp_path / "rank0.jsonl", [step_record(step=1)])
    with (tmp_path / "rank0.jsonl").open("a") as file:
        file.write('{"step": \n')
    with pytest.raises(ContractError, match=r"rank0.jsonl: line 2: not valid JSON"):
        read_rank_metrics(tmp_path)


def test_a_record_without_a_contract_field_names_file_line_and_field(tmp_path):
    line = step_record(step=1).as_json()
    del line["step_time(s)"]
    (tmp_path / "rank0.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ContractError, match=r"rank0.jsonl: line 1: step_time\(s\): Field required"):
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


# Illustrative lines in DeepSpeed 0.19.8's formats, the numbers made up (docs/reference.md section 3): no run
# measured them, and nothing takes a constant from them.
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
    assert json.loads(events.iloc[2]["detail"]) == {
        "ma_GiB": 6.01,
        "max_ma_GiB": 19.52,
        "ca_GiB": 20.1,
        "max_ca_GiB": 21.0,
    }
    assert events.iloc[2]["step"] == 10  # attributed to the last announced step
    assert json.loads(events.iloc[3]["detail"]) == {
        "forward_microstep": 412.5,
        "backward_microstep": 930.1,
        "step_microstep": 5.2,
    }


def test_real_killed_rank_log_is_a_failure_with_its_last_lines(tiny_profile):
    # Captured: smoke profile, rank 1 killed with SIGKILL after 3 steps; rank 0 then died in gloo.
    text = (DATA / "deepspeed_0.19.8_cpu_fp32_rank1_killed.log").read_text()
    events = parse_launcher_log(text)
    exit_error = events[events["kind"] == "rank_exit_error"].iloc[0]
    # DeepSpeed's launcher prints the last command it started ('--local_rank=1' of two), whichever exited:
    # the line alone names no rank.
    assert pd.isna(exit_error["rank"]) and json.loads(exit_error["detail"]) == {
        "code": -9.0,
        "started_local_ranks": 2,
        "ambiguous": LAST_STARTED.format(local_rank=1),
    }
    steps = synthetic_steps(steps=3)
    meta = run_metadata(steps, events, None, text, expected_steps=12)
    # Rank 0 raised (its traceback), so the exit by SIGKILL is the other one's: rank 1.
    assert meta.failed_ranks == [0, 1] and not meta.finished
    killed = next(f for f in meta.failures if f.kind == "rank_exit_error")
    assert (killed.rank, killed.exit_code, killed.line) == (1, -9, exit_error["line"])
    traceback = next(f for f in meta.failures if f.kind == "traceback")
    assert "Connection reset by peer" in traceback.message and len(traceback.last_lines) > 3
    gate = next(g for g in settings(tiny_profile).gates if g.name == "ranks_completed")
    result = judged_gate(
        gate,
        steps,
        events,
        None,
        CPU_FINGERPRINT,
        1,
        12,
        spike_rule(tiny_profile),
        run_meta=meta,
        world_size=2,
    )
    assert result.verdict == FAIL and result.measured == 2
    assert "rank 0 failed: RuntimeError" in result.reason
    assert result.evidence.failures[0].last_lines


def test_training_loop_skip_reasons_become_overflow_flags_only_under_a_loss_scaler(tiny_profile):
    # What zerogate.train.loop writes: skip_reason per step, DeepSpeed's cumulative counter (which also counts
    # the stabiliser's dropped updates) and the loss scale, null without fp16. Only skip_reason counts.
    reasons = [None, "fp16_overflow", None, "nonfinite_loss", None]
    scales = [65536.0, 32768.0, 32768.0, 32768.0, 32768.0]
    records = [
        step_record(
            step=i + 1,
            skip_reason=reason,
            update_applied=reason is None,
            loss_scale=scale,
            skipped_steps_deepspeed=skipped,
        )
        for i, (reason, scale, skipped) in enumerate(zip(reasons, scales, [0, 1, 1, 2, 2]))
    ]
    steps = table_of(records)
    assert measures.overflow_skipped(steps).tolist() == [False, True, False, False, False]
    assert list(read_back(records).columns) == list(STEP_COLUMNS)  # parsing derives nothing: one source
    fp32 = table_of([record.model_copy(update={"loss_scale": None}) for record in records])
    assert measures.overflow_skipped(fp32) is None  # fp32: no loss scaler, nothing to count
    gate = next(g for g in settings(tiny_profile).gates if g.name == "overflow_skip_fraction")
    fp32_config = DsConfig.of(
        {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "fp16": {"enabled": False}},
        "ds_config.json",
    )
    result = judged_gate(
        gate,
        fp32,
        parse_launcher_log(""),
        None,
        CPU_FINGERPRINT,
        1,
        5,
        spike_rule(tiny_profile),
        world_size=1,
        ds_config=fp32_config,
    )
    assert result.verdict == NOT_MEASURED and "no fp16 loss scaler" in result.reason


def read_back(records):
    """The records as parse_logs reads them back from the ranks' JSON lines."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        for rank in {record.rank for record in records}:
            write_lines(Path(directory, f"rank{rank}.jsonl"), [r for r in records if r.rank == rank])
        return read_rank_metrics(directory)


def test_stabiliser_events_become_event_rows(tmp_path):
    from zerogate.analysis.parse import stabiliser_events
    from zerogate.contracts.parsed import EVENT_COLUMNS

    path = tmp_path / "events.jsonl"
    write_lines(
        path,
        [
            StabiliserEvent(step=12, rank=1, kind="nonfinite_loss", value="nan", action="rollback"),
            StabiliserEvent(step=30, rank=0, kind="loss_spike", value=9.5, action="skip"),
        ],
    )
    path.write_text(path.read_text().replace("\n", "\n\n", 1))  # a blank line is skipped
    events = stabiliser_events(path)
    assert list(events.columns) == list(EVENT_COLUMNS) and len(events) == 2
    assert events["kind"].tolist() == ["stabiliser", "stabiliser"]
    assert events["rank"].tolist() == [1, 0] and events["step"].tolist() == [12, 30]
    assert str(events["rank"].dtype) == str(events["step"].dtype) == str(events["line"].dtype) == "Int64"
    assert events["line"].isna().all()
    assert events["message"].tolist() == ["nonfinite_loss = nan: rollback", "loss_spike = 9.5: skip"]
    assert json.loads(events["detail"][0]) == {"kind": "nonfinite_loss", "value": "nan", "action": "rollback"}
    assert json.loads(events["detail"][1]) == {"kind": "loss_spike", "value": 9.5, "action": "skip"}
    table = event_table(events, "stabiliser")
    assert table["kind"].tolist() == ["nonfinite_loss", "loss_spike"] and table["step"].tolist() == [12, 30]
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    assert list(stabiliser_events(empty).columns) == list(EVENT_COLUMNS) and not len(stabiliser_events(empty))


def test_rank_records_are_sorted_by_rank_then_step_and_blank_lines_skipped(tmp_path):
    write_lines(
        tmp_path / "rank1.jsonl",
        [step_record(rank=1, step=2, loss=1.0), step_record(rank=1, step=1, loss=2.0)],
    )
    (tmp_path / "rank1.jsonl").write_text((tmp_path / "rank1.jsonl").read_text().replace("\n", "\n\n", 1))
    write_lines(tmp_path / "rank0.jsonl", [step_record(rank=0, step=1, loss=3.0)])
    (tmp_path / "other.jsonl").write_text('{"rank": 9, "step": 1}\n')  # not a rank file
    steps = read_rank_metrics(tmp_path)
    assert steps[["rank", "step", "loss"]].values.tolist() == [[0, 1, 3.0], [1, 1, 2.0], [1, 2, 1.0]]
    assert list(steps.index) == [0, 1, 2]
    empty = read_rank_metrics(tmp_path / "nothing-here")
    assert list(empty.columns) == list(STEP_COLUMNS) and not len(empty)
    write_lines(tmp_path / "rank2.jsonl", [step_record(rank=2, step=1)])
    with (tmp_path / "rank2.jsonl").open("a") as file:
        file.write('  \n{"rank": 2, oops}\n')
    with pytest.raises(ContractError, match=r"rank2.jsonl: line 3: not valid JSON \("):
        read_rank_metrics(tmp_path)


def test_last_log_lines_of_a_rank_or_of_the_log():
    from zerogate.analysis.parse import last_log_lines

    text = "\n".join([f"[rank0]: a{i}" for i in range(15)] + ["[rank1]: b", "plain", "", "last"]) + "\r\n"
    assert last_log_lines(text, 0) == [f"[rank0]: a{i}" for i in range(3, 15)]
    assert last_log_lines(text, 0, count=2) == ["[rank0]: a13", "[rank0]: a14"]
    assert last_log_lines(text, 1) == ["[rank1]: b"]
    assert last_log_lines(text, 7, count=3) == [
        "[rank1]: b",
        "plain",
        "last",
    ]  # no lines of its own: the log's
    assert last_log_lines(text, None, count=2) == ["plain", "last"]
    assert len(last_log_lines(text, None)) == 12


def test_parse_run_is_the_parse_logs_rules_work(tmp_path):
    from zerogate.analysis.parse import parse_run

    metrics = tmp_path / "metrics"
    metrics.mkdir()
    for rank in (0, 1):
        write_lines(metrics / f"rank{rank}.jsonl", [step_record(rank=rank, step=s, loss=1.0) for s in (1, 2)])
    log = tmp_path / "train.log"
    log.write_text(
        "[Rank 0] step=2, skipped=1, lr=[1e-05]\n[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "x.py", line 1\n[rank1]: RuntimeError: boom\n'
    )
    events_file = tmp_path / "events.jsonl"
    write_lines(events_file, [StabiliserEvent(step=2, rank=0, kind="loss_spike", value=9.0, action="skip")])
    steps, events, meta = parse_run(metrics, log, train_summary(world_size=2), events_file, 2)
    assert len(steps) == 4 and set(events["kind"]) == {"ds_progress", "traceback", "stabiliser"}
    assert meta.world_size == 2 and meta.expected_steps == 2 and meta.finished is True
    assert meta.failed_ranks == [1] and meta.deepspeed_skipped_steps == ProgressSkips(step=2, skipped=1)
    assert meta.event_counts == {"ds_progress": 1, "traceback": 1}
    assert meta.steps_completed_per_rank == {0: 2, 1: 2}
    events_file.write_text("")
    _, quiet, unfinished = parse_run(metrics, log, None, events_file, 2)
    assert (
        "stabiliser" not in set(quiet["kind"]) and unfinished.world_size is None and not unfinished.finished
    )


def test_failed_gates_lists_the_fails_with_their_reasons():
    from tests.unit.helpers import settings, synthetic_steps
    from zerogate.analysis.gates import failed_gates
    from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS, GateVerdict, GateVerdicts, Reproduction

    step, micro, floor = (
        next(g for g in settings("cpu-tiny").gates if g.name == name)
        for name in ("optimizer_step_time", "micro_step_time", "step_time_over_physical_floor")
    )
    verdicts = GateVerdicts(
        gates=[
            GateVerdict.judged(step, 2.5, FAIL, "too slow"),
            GateVerdict.judged(micro, 0.3, PASS, ""),
            GateVerdict.judged(floor, None, NOT_MEASURED, "no plan"),
        ],
        counts={PASS: 1, FAIL: 1, NOT_MEASURED: 1},
        reproduction=Reproduction(faithful=False, reasons=["no GPU"]),
        records=record_completeness(synthetic_steps(), 2, 200).evidence(),
    )
    assert failed_gates(verdicts) == ["optimizer_step_time: too slow"]


GATE_KINDS = [
    "overflow",
    "fatal_loss_scale",
    "ds_progress",
    "wall_clock",
    "throughput",
    "memory",
    "traceback",
    "rank_exit_error",
    "rank_exit_ok",
    "loss_scale_reduced",
]


@pytest.mark.parametrize(
    "log, counts",
    [
        (
            "deepspeed_0.19.8_cpu_fp32_rank1_killed.log",
            {"wall_clock": 36, "traceback": 1, "rank_exit_error": 1},
        ),
        ("deepspeed_0.19.8_cpu_fp32_wall_clock.log", {"wall_clock": 121, "rank_exit_ok": 2}),
        ("deepspeed_0.19.8_cpu_fp32_zero3.log", {"rank_exit_ok": 2}),
        (
            "deepspeed_fp16_overflow.log",
            {
                "overflow": 3,
                "ds_progress": 2,
                "loss_scale_reduced": 1,
                "traceback": 1,
                "fatal_loss_scale": 1,
                "rank_exit_error": 1,
            },
        ),
    ],
)
def test_captured_logs_give_the_events_the_gates_read(log, counts):
    # The counts the parser gave these logs before it knew other formats: unchanged (launcher_log's kinds
    # added beside them: world_info, overflow_skip).
    events = parse_launcher_log((DATA / log).read_text())
    assert {
        kind: int((events["kind"] == kind).sum()) for kind in GATE_KINDS if (events["kind"] == kind).any()
    } == counts


def test_a_glued_progress_bar_is_no_longer_part_of_the_wall_clock_message():
    events = parse_launcher_log((DATA / "deepspeed_0.19.8_cpu_fp32_wall_clock.log").read_text())
    assert events[events["kind"] == "wall_clock"]["message"].str.startswith("[Rank 0] time (ms) |").all()
