"""The parts of the training entry point that run without DeepSpeed: data order and metrics."""

import numpy as np
import torch

from zerogate.contracts.base import read_lines
from zerogate.contracts.records import StepRecord
from zerogate.data.dataset import EncodedSplit
from zerogate.runtime.loop import RankBatches
from zerogate.train.metrics import StepMetrics


def split(rows=50, seq=8):
    ids = np.arange(rows * seq).reshape(rows, seq)
    return EncodedSplit(ids, ids.copy(), np.ones_like(ids), 0)


def rows_seen(batches, steps, accumulation):
    return [int(batches.get(s, m)["input_ids"][0, 0]) // 8 for s in range(steps) for m in range(accumulation)]


def test_ranks_see_disjoint_samples_within_an_epoch():
    data = split()
    rank0 = rows_seen(RankBatches(data, 2, 0, 1, 4, seed=3), 6, 4)
    rank1 = rows_seen(RankBatches(data, 2, 1, 1, 4, seed=3), 6, 4)
    assert not set(rank0) & set(rank1)
    assert len(set(rank0)) == len(rank0) == 24


def test_data_order_depends_only_on_seed_and_step():
    data = split()
    a = RankBatches(data, 2, 0, 1, 4, seed=3)
    b = RankBatches(data, 2, 0, 1, 4, seed=3)
    assert rows_seen(a, 20, 4) == rows_seen(b, 20, 4)  # crosses epochs: 160 samples over 50 rows
    late = int(b.get(17, 2)["input_ids"][0, 0])  # random access (resume) gives the same batch
    assert late == int(RankBatches(data, 2, 0, 1, 4, seed=3).get(17, 2)["input_ids"][0, 0])
    assert rows_seen(RankBatches(data, 2, 0, 1, 4, seed=4), 5, 4) != rows_seen(a, 5, 4)


def test_step_metrics_lines_carry_units_and_peaks(tmp_path):
    recorder = StepMetrics(tmp_path / "rank0.jsonl", 0, torch.device("cpu"))
    for step in (1, 2):
        recorder.start_step()
        recorder.end_step(step, loss=2.5, grad_norm=0.7, lr=1e-3, tokens=100, micro_steps=8)
    recorder.end_step(3, loss=float("nan"), grad_norm=None, lr=1e-3, tokens=100, micro_steps=8)
    recorder.close()
    text = (tmp_path / "rank0.jsonl").read_text()
    assert "warmup" not in text  # warm-up is an analysis setting, never recorded
    lines = read_lines(StepRecord, tmp_path / "rank0.jsonl")  # every line a StepRecord
    first = lines[0]
    # The keys carry their units: the StepRecord's aliases.
    for name, key in (
        ("step_time_s", "step_time(s)"),
        ("micro_step_time_s", "micro_step_time(s)"),
        ("device_peak_gib", "memory/device_peak(GiB)"),
        ("rss_gib", "memory/rss(GiB)"),
        ("tokens_per_s", "tokens_per_s"),
    ):
        assert StepRecord.key(name) == key and key in first.as_json() and f'"{key}"' in text.splitlines()[0]
    assert first.micro_step_time_s == first.step_time_s / 8
    assert 0 < first.device_peak_gib < 64
    assert lines[2].loss_finite is False and lines[2].grad_norm is None


def test_metrics_off_answers_every_call_the_loop_makes():
    import inspect
    import re

    import zerogate.train.loop
    from zerogate.train.metrics import NoMetrics

    called = set(re.findall(r"\bmetrics\.(\w+)\(", inspect.getsource(zerogate.train.loop)))
    assert {"start_step", "end_step", "reset_window", "close"} <= called
    missing = {name for name in called if not callable(getattr(NoMetrics, name, None))}
    assert not missing, f"NoMetrics lacks {sorted(missing)}"
