"""The parser against real launcher logs: every excerpt of tests/data/logs/ (public logs, see its README)
agrees with the truth sidecar written by reading it, through the judge_log rule's own function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerogate.analysis.log_gates import judge_log_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "logs"
SIDECARS = sorted(CORPUS.glob("*.truth.json"))
COUNTS = (
    "skipped_steps",
    "hysteresis_skips",
    "last_loss_scale",
    "progress_lines",
    "wall_clock_lines",
    "throughput_lines",
    "memory_lines",
    "tracebacks",
    "fatal_loss_scale",
    "failed_ranks",
    "exit_errors",
    "world_size",
)


def slug(sidecar: Path) -> str:
    return sidecar.name.removesuffix(".truth.json")


def test_the_corpus_has_thirty_excerpts_each_with_a_sidecar_and_a_readme_row():
    logs = {p.stem for p in CORPUS.glob("*.log")}
    assert len(SIDECARS) >= 30 and logs == {slug(s) for s in SIDECARS}
    readme = (CORPUS / "README.md").read_text()
    for sidecar in SIDECARS:
        truth = json.loads(sidecar.read_text())
        assert truth["source"].startswith("https://github.com/") and truth["title"] and truth["excerpt"]
        assert f"`{slug(sidecar)}.log`" in readme and truth["source"] in readme


@pytest.mark.parametrize("sidecar", SIDECARS, ids=slug)
def test_excerpt_agrees_with_its_sidecar(sidecar):
    expected = json.loads(sidecar.read_text())["expected"]
    assert set(COUNTS) <= set(expected)
    summary = judge_log_file(CORPUS / f"{slug(sidecar)}.log", slug(sidecar), gates=[], warmup_steps=0)
    found = summary.as_json()
    assert {key: found[key] for key in expected} == expected
