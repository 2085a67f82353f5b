import json
from pathlib import Path

import pytest

from zerogate.parse import parse_launcher_log, read_rank_metrics

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
