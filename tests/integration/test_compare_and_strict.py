"""The compare target over two runs, and the strict option, through Snakemake itself.

The compare runs are written from synthetic step records (no training), so this takes seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.pipeline import copy_repo, env
from tests.unit.test_compare import write_run

pytestmark = pytest.mark.integration


def snakemake(workdir, *args):
    command = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    return subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=600)


def test_compare_target_writes_the_comparison_and_flags_a_differing_dataset(tmp_path, tiny_profile):
    workdir = copy_repo(tmp_path)
    write_run(workdir, tiny_profile, "lab-a")
    write_run(workdir, tiny_profile, "lab-b", dataset_hash="e" * 64, profile="cpu-tiny")
    done = snakemake(workdir, "compare")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rule train" not in done.stderr  # reading other runs never trains
    pages = list((workdir / "results/compare").glob("comparison-*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    assert "<table border=\"1\" class=\"dataframe\" id=\"comparison\">" in page
    assert "dataset hash differs" in page and "lab-a" in page and "lab-b" in page
    assert page.count("data:image/png;base64,") == 2


def test_compare_with_a_missing_run_stops_with_one_line(tmp_path, tiny_profile):
    workdir = copy_repo(tmp_path)
    write_run(workdir, tiny_profile, "lab-a")
    done = snakemake(workdir, "compare", "--config", "compare=[results/smoke/lab-a,results/smoke/nope]")
    assert done.returncode != 0
    assert "zerogate: error: --config: compare: no run registry at results/smoke/nope/registry.json" in done.stderr
