"""A user's own JSONL, with its own column names mapped in a profile, trained end to end; and a malformed
file refused before training with the line number. Runs Snakemake and DeepSpeed for real (the probe is
the session smoke run's)."""

from __future__ import annotations

import json
import random

import pytest

from tests.integration import prefetch
from tests.integration.pipeline import MACHINE, copy_repo, snakemake
from zerogate.contracts.base import read_lines
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.records import EvalRecord, TrainSummary

pytestmark = pytest.mark.integration

PROFILE = """\
extends: smoke
description: a user's JSONL with its own column names
dataset:
  source: data/mine.jsonl
  columns: {prompt: question, response: reply}
  template: plain
  too_long: drop
  validation_fraction: 0.05
  seed: 3
  seq_len: 48
  vocab_size: 128
evaluation:
  every_steps: 20
  validation_rows: 32
"""


def user_rows(count: int) -> list[dict]:
    rng = random.Random(5)
    rows = []
    for _ in range(count):
        word = " ".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        rows.append({"id": len(rows), "question": f"reverse: {word}", "reply": word[::-1]})
    return rows


# The data path through training and evaluation; what comes after (parsing, gates, report) does not depend on
# where the rows came from and is the shared smoke run's to test.
TRAINED = tuple(f"results/user-jsonl/{MACHINE}/train/{name}" for name in ("summary.json", "eval.jsonl"))


@prefetch.prefetched
def prepare_user_run(tmp_path_factory, smoke_run):
    """A copy of the repository with the user's file, its profile and the smoke run's probe; the build trains
    it."""
    workdir = copy_repo(tmp_path_factory.mktemp("zerogate-user"))
    smoke_run.share_probe(workdir, "user-jsonl", MACHINE)
    (workdir / "data").mkdir()
    (workdir / "data/mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in user_rows(1500)))
    (workdir / "config/profiles/user-jsonl.yaml").write_text(PROFILE)
    return lambda: (workdir, snakemake(workdir, profile="user-jsonl", targets=TRAINED))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, smoke_run):
    workdir, done = prefetch.result(__name__, prepare_user_run, tmp_path_factory, smoke_run)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir


def test_user_jsonl_trains_end_to_end_with_the_mapping(workdir):
    results = workdir / "results/user-jsonl" / MACHINE
    manifest = DatasetManifest.read(results / "dataset/manifest.json")
    assert manifest.rows_read == 1500 and manifest.file["source"] == "data/mine.jsonl"
    assert len(manifest.file["file_sha256"]) == 64
    assert manifest.splits["validation"].rows == 75
    assert TrainSummary.read(results / "train/summary.json").completed_steps == 40
    records = read_lines(EvalRecord, results / "train/eval.jsonl")
    assert [r.phase for r in records] == ["before", "during", "after"]
    assert [r.step for r in records] == [0, 20, 40]
    assert records[-1].validation_loss < records[0].validation_loss
    assert records[0].exact_match_accuracy is None  # no reference answers for a user dataset


def test_malformed_line_is_refused_before_training(workdir):
    results = workdir / "results/user-jsonl" / MACHINE
    before = {path: path.stat().st_mtime_ns for path in results.rglob("*") if path.is_file()}
    lines = (workdir / "data/mine.jsonl").read_text().splitlines()
    lines[6] = lines[6][:-3]
    (workdir / "data/mine.jsonl").write_text("\n".join(lines) + "\n")
    done = snakemake(workdir, profile="user-jsonl", targets=TRAINED)
    assert done.returncode != 0
    assert "data/mine.jsonl: line 7: malformed JSON" in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("zerogate: error:")]
    assert len(errors) == 1
    # Refused when the workflow loads: no job ran, and nothing of the earlier run was written or removed.
    assert {path: path.stat().st_mtime_ns for path in results.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("damage", ["malformed line", "missing column"])
def test_bad_dataset_file_is_refused_before_the_probe_runs(tmp_path, damage):
    """The file is checked when the profile loads, with the profile itself: no job starts, not even the
    probe."""
    workdir = copy_repo(tmp_path)
    rows = user_rows(20)
    if damage == "missing column":
        rows = [{k: v for k, v in row.items() if k != "reply"} for row in rows]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if damage == "malformed line":
        lines = text.splitlines()
        lines[6] = lines[6][:-3]
        text = "\n".join(lines) + "\n"
    (workdir / "data").mkdir()
    (workdir / "data/mine.jsonl").write_text(text)
    (workdir / "config/profiles/user-jsonl.yaml").write_text(PROFILE)
    done = snakemake(workdir, profile="user-jsonl", targets=TRAINED)
    errors = [
        line for line in (done.stdout + done.stderr).splitlines() if line.startswith("zerogate: error:")
    ]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-3000:]
    expected = (
        "data/mine.jsonl: line 7: malformed JSON"
        if damage == "malformed line"
        else "data/mine.jsonl: mapped column 'reply' (dataset.columns.response) not found"
    )
    assert expected in errors[0]
    assert not (workdir / "results").exists()  # nothing ran: no probe, no plan
