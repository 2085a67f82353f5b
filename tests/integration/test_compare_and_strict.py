"""The compare target over two runs, and the strict option, through Snakemake itself.

The compare runs are written from synthetic step records (no training), so this takes seconds.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.pipeline import copy_repo, env
from tests.unit.test_compare import write_run

pytestmark = pytest.mark.integration


def snakemake(workdir, *args):
    command = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    return subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=600)


def test_compare_target_groups_the_runs_and_lists_the_odd_one_apart(tmp_path, tiny_profile):
    workdir = copy_repo(tmp_path)
    write_run(workdir, tiny_profile, "lab-a")
    write_run(workdir, tiny_profile, "lab-c", step_time=0.6)
    write_run(workdir, tiny_profile, "lab-b", dataset_hash="e" * 64, profile="cpu-tiny")
    done = snakemake(workdir, "compare", "--config", "compare_reference=lab-c")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rule train" not in done.stderr  # reading other runs never trains
    pages = list((workdir / "results/compare").glob("comparison-*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    assert "<table id='group-1' class='fixed comparison'>" in page and "lab-c (reference)" in page
    assert "<table id='not-comparable'" in page and "the only run of profile cpu-tiny" in page
    assert page.count("data:image/png;base64,") == 2


def test_compare_with_a_missing_run_stops_with_one_line(tmp_path, tiny_profile):
    workdir = copy_repo(tmp_path)
    write_run(workdir, tiny_profile, "lab-a")
    done = snakemake(workdir, "compare", "--config", "compare=[results/smoke/lab-a,results/smoke/nope]")
    assert done.returncode != 0
    assert (
        "zerogate: error: --config: compare: no run registry at results/smoke/nope/registry.json"
        in done.stderr
    )
