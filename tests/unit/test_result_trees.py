"""Two result trees compared (zerogate.bench.result_trees): a changed loss or memory figure is a difference,
a changed clock reading or provenance is set aside, and with a second run of the same code what varies from
run to run is set aside too. The trees hold step records as the training loop writes them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.unit.helpers import step_record
from zerogate.bench.result_trees import compare_trees, key_words, main, set_aside
from zerogate.contracts.base import line_of


def write_run(root: Path, **changes: float) -> Path:
    """A run's records (two ranks, three steps) and its steps table; ``changes`` replace fields of rank 0's
    last step."""
    metrics = root / "train" / "metrics"
    metrics.mkdir(parents=True)
    for rank in (0, 1):
        records = [step_record(step=step, rank=rank, loss=3.0 - 0.1 * step) for step in (1, 2, 3)]
        if rank == 0:
            records[-1] = records[-1].model_copy(update=changes)
        (metrics / f"rank{rank}.jsonl").write_text("\n".join(line_of(r) for r in records) + "\n")
    table = pd.DataFrame([r.as_json() for r in records])
    (root / "parsed").mkdir()
    table.to_parquet(root / "parsed" / "steps.parquet")
    return root


def test_the_same_run_is_the_same(tmp_path):
    before, after = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    comparison = compare_trees(before, after)
    assert comparison.same and all(not r.differences and not r.set_aside for r in comparison.compared)
    assert len(comparison.compared) == 3


def test_a_changed_loss_differs_and_a_changed_step_time_is_set_aside(tmp_path):
    before = write_run(tmp_path / "a")
    slower = compare_trees(before, write_run(tmp_path / "b", step_time_s=9.0))
    assert slower.same
    rank0 = next(r for r in slower.compared if r.path.endswith("rank0.jsonl"))
    assert rank0.set_aside == {"2/step_time(s)": "clock"}

    other_loss = compare_trees(before, write_run(tmp_path / "c", loss=1.0))
    assert not other_loss.same
    rank0 = next(r for r in other_loss.compared if r.path.endswith("rank0.jsonl"))
    assert list(rank0.differences) == ["2/loss"]


def test_what_varies_between_two_runs_of_the_same_code_is_set_aside_and_nothing_else(tmp_path):
    before = write_run(tmp_path / "a")
    noise = write_run(tmp_path / "n", rss_gib=0.61)  # the resident set moved by 0.01 GiB between two runs
    after = write_run(tmp_path / "b", rss_gib=0.605, grad_norm=2.0)
    comparison = compare_trees(before, after, noise)
    rank0 = next(r for r in comparison.compared if r.path.endswith("rank0.jsonl"))
    assert rank0.set_aside == {"2/memory/rss(GiB)": "varies between two runs of the same code"}
    assert list(rank0.differences) == ["2/grad_norm"]
    without_noise = compare_trees(before, after).compared
    assert next(r for r in without_noise if r.path.endswith("rank0.jsonl")).differences.keys() == {
        "2/memory/rss(GiB)",
        "2/grad_norm",
    }
    # A move larger than the two runs of the same code showed is a difference.
    further = compare_trees(before, write_run(tmp_path / "c", rss_gib=0.62), noise)
    rank0 = next(r for r in further.compared if r.path.endswith("rank0.jsonl"))
    assert list(rank0.differences) == ["2/memory/rss(GiB)"]


def test_a_file_in_one_tree_only_is_a_difference_and_the_command_says_so(tmp_path, capsys):
    before, after = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (after / "plan.json").write_text("{}")
    assert main([str(before), str(after)]) == 1
    assert "ONLY AFTER plan.json" in capsys.readouterr().out
    (after / "plan.json").unlink()
    assert main([str(before), str(after)]) == 0


def test_a_key_is_read_word_by_word():
    assert key_words("step_time_median(s)") == ["step", "time", "median", "s"]
    assert key_words("RunningAvgSamplesPerSec") == ["running", "avg", "samples", "per", "sec"]
    assert set_aside(("runtime_baseline",)) is None  # memory, though "runtime" holds "time"
    assert set_aside(("update_applied",)) is None
    assert set_aside(("memory/peak_rss(GiB)",)) is None
    assert set_aside(("git", "commit")) == "provenance"
    assert set_aside(("rows", "3", "seconds")) == "clock"
