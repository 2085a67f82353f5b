"""The benchmarks' tables: each run's step time is the pipeline's (analysis.measures.step_time on the
run's per-rank metrics), never a statistic of their own."""

import pytest

from tests.unit.helpers import step_record
from zerogate.analysis.measures import step_time
from zerogate.analysis.parse import read_rank_metrics
from zerogate.bench import ddp_vs_zero3, metrics_overhead
from zerogate.contracts.base import write_lines
from zerogate.contracts.records import GitState, StabiliserSummary, TrainSummary


def write_run(directory, per_rank_times):
    """A run's metrics directory as the training loop writes it: one StepRecord line per rank and step."""
    directory.mkdir(parents=True)
    for rank, times in enumerate(per_rank_times):
        write_lines(
            directory / f"rank{rank}.jsonl",
            [
                step_record(rank=rank, step=step, step_time_s=t, loss=1.0)
                for step, t in enumerate(times, start=1)
            ],
        )
    return str(directory)


def summary(wall_time_s, metrics_time_s=0.0):
    """A finished run's train/summary.json (rank 0's TrainSummary), metrics on or off."""
    return TrainSummary(
        completed_steps=60,
        resumed_from_step=None,
        stabiliser=StabiliserSummary(policy="skip", skipped_steps=0, rollbacks=0, skipped_windows=[]),
        world_size=2,
        parameters=139584,
        wall_time_s=wall_time_s,
        metrics_time_s=metrics_time_s,
        dtype="fp32",
        accelerator="cpu",
        git=GitState(commit="abc123", dirty=False),
    )


def test_ddp_vs_zero3_rows_use_the_pipelines_step_time(tmp_path):
    # Rank 1 is slow on one step, rank 0 on others: the slowest-rank median (median per rank, then max)
    # differs from a max-per-step-then-median, so a private statistic would show.
    runs = {}
    for index, name in enumerate(ddp_vs_zero3.ROWS):
        scale = index + 1
        runs[name] = [
            write_run(
                tmp_path / name / str(repeat),
                [
                    [9.0, scale * 1.0, scale * 3.0, scale * 1.0, scale * 3.0],
                    [9.0, scale * 2.9, scale * 1.1, scale * 2.9, scale * 1.1],
                ],
            )
            for repeat in range(2)
        ]
    result = ddp_vs_zero3.table(runs, warmup_steps=1)
    for row in result["rows"]:
        expected = step_time(read_rank_metrics(runs[row["run"]][0]), 1).value
        assert row["per_repeat_step_time(s)"] == [expected, expected]
        assert row["step_time(s)"] == expected
    ddp, zero3 = result["rows"][0], next(r for r in result["rows"] if r["run"] == "zero3")
    assert zero3["ratio_to_ddp"] == pytest.approx(zero3["step_time(s)"] / ddp["step_time(s)"])
    assert "target <= 1.5" in ddp_vs_zero3.text(result, "bench", 5)


def test_metrics_overhead_from_the_runs_summaries():
    on = [summary(10.2, 0.1), summary(10.4, 0.1)]
    off = [summary(10.0), summary(10.0)]
    result = metrics_overhead.table(on, off)
    assert result["overhead_percent"] == pytest.approx(3.0)
    assert result["inside_metrics_percent"] == pytest.approx(100 * 0.1 / 10.3, rel=0.01)
    assert "overhead +3.0 %" in metrics_overhead.text(result, "bench", 60)


def test_the_bisects_figures_are_the_pipelines_statistics_with_their_intervals(tmp_path, capsys):
    """bisect_step_time reads each commit's kept step records and reports today's slowest-rank median with
    its interval per run, the runs pooled, and each commit's ratio to the first, beyond noise or not."""
    import numpy as np

    from zerogate.bench import bisect_step_time
    from zerogate.contracts.summary import IntervalRule

    rng = np.random.default_rng(0)
    for sha, level in (("aaa", 0.20), ("bbb", 0.30)):
        for run in range(2):
            write_run(
                tmp_path / sha / f"run{run}",
                [list(level * (1 + 0.02 * rng.standard_normal(60))) for _ in range(2)],
            )
    rows = bisect_step_time.analyse(["aaa", "bbb"], tmp_path, IntervalRule())
    first = read_rank_metrics(tmp_path / "aaa/run0")
    assert rows[0]["runs"][0]["median(s)"] == step_time(first, bisect_step_time.WARMUP_STEPS).value
    assert rows[0]["beyond_noise"] is None and rows[1]["beyond_noise"] is True
    assert (
        1.4
        < rows[1]["ratio_interval"]["low"]
        < rows[1]["ratio_to_first"]
        < rows[1]["ratio_interval"]["high"]
        < 1.6
    )
    assert "bbb: runs" in capsys.readouterr().out


def test_peers_vs_zero3_divides_the_pipelines_step_times_and_brackets_each_ratio(tmp_path):
    import numpy as np

    from zerogate.bench import peers_vs_zero3
    from zerogate.contracts.summary import IntervalRule

    rng = np.random.default_rng(0)
    metrics = {}
    for index, name in enumerate(peers_vs_zero3.ROWS):
        scale = 1.0 + 0.25 * index  # zero3 1.0 s, the next row 1.25 s, ...
        metrics[name] = write_run(
            tmp_path / name, [list(scale * (1 + 0.01 * rng.standard_normal(30))) for _ in (0, 1)]
        )
    result = peers_vs_zero3.table(metrics, warmup_steps=2, rule=IntervalRule(resamples=200))
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["zero3"]["ratio_to_zero3"] == 1.0
    fsdp2 = rows["fsdp2"]
    assert fsdp2["step_time(s)"] == step_time(read_rank_metrics(metrics["fsdp2"]), 2).value
    assert fsdp2["ratio_to_zero3"] == pytest.approx(fsdp2["step_time(s)"] / rows["zero3"]["step_time(s)"])
    low, high = fsdp2["ratio_interval"]
    assert low < 1.5 < high and high - low < 0.1  # 1.5 x by construction, 1 % noise per step
    # Identical losses everywhere: every peer agrees with the ZeRO variant it trains from, within the floor.
    assert {(a["peer"], a["reference"]) for a in result["loss_agreement"]} >= {("fsdp2", "zero3")}
    assert all(a["within"] for a in result["loss_agreement"])
    printed = peers_vs_zero3.text(result, "bench", 30)
    assert f"fsdp2              {fsdp2['step_time(s)']:.4f} s" in printed
    assert f"ratio to ZeRO-3 {fsdp2['ratio_to_zero3']:.3f} [{low:.3f}, {high:.3f}]" in printed
