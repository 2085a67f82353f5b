"""Who waits for whom, on real DeepSpeed ranks: the smoke run retrained with rank 1 made slow (the `slow`
fault injection) must have its report name rank 1 the straggler and rank 0 the rank that waits for it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from tests.integration.pipeline import snakemake
from zerogate.analysis import measures

pytestmark = pytest.mark.integration

DELAY_S = 0.05  # per micro-step on rank 1: small, so the retrained smoke run costs little


def verdict_line(results) -> str:
    """The Ranks verdict of the newest report (the injection changed the config hash, so the report's name)."""
    page = max((results / "report").glob("zerogate-v*.html"), key=lambda p: p.stat().st_mtime_ns).read_text()
    return re.sub(r"\s+", " ", re.search(r"<p id='ranks-verdict'>(.*?)</p>", page, re.S).group(1))


def test_a_slow_rank_is_named_the_straggler_and_the_other_waits_for_it(smoke_run, smoke_profile):
    accumulation = smoke_profile["training"]["gradient_accumulation_steps"]
    warmup = smoke_profile["training"]["warmup_steps_excluded"]
    injected = DELAY_S * accumulation  # extra seconds per optimizer step on rank 1
    with smoke_run.borrowed() as (workdir, results):
        profile = workdir / "config/profiles/smoke.yaml"
        profile.write_text(profile.read_text() + f"stabiliser:\n  inject: {{kind: slow, rank: 1, seconds: {DELAY_S}}}\n")
        done = snakemake(workdir)
        assert done.returncode == 0, done.stderr[-4000:]
        assert re.search(r"rule train:", done.stdout + done.stderr)  # the injection retrained
        settings = json.loads((results / "train/settings.json").read_text())
        assert settings["stabiliser"]["inject"] == {"kind": "slow", "rank": 1, "seconds": DELAY_S}

        steps = pd.read_parquet(results / "parsed/steps.parquet")
        balance = measures.rank_balance(steps, warmup, world_size=2)
        assert balance.measured, balance.problems
        assert balance.straggler == 1 and balance.next_slowest == 0
        # The injected time is rank 1's compute, and rank 0 spends it waiting in collectives.
        assert 0.5 * injected < balance.excess < 1.5 * injected, balance.evidence()
        assert 0.5 * injected < balance.waiting_for_straggler[0] < 1.5 * injected, balance.evidence()
        assert balance.wait[1] < 0.25 * injected, balance.evidence()

        line = verdict_line(results)
        assert line.startswith("The slowest rank is <b>rank 1</b>"), line
        assert "The others wait for it: rank 0 waits" in line and "rank 1 waits" not in line, line
        summary = json.loads((results / "registry.json").read_text())["summary"]
        assert summary["straggler_rank"] == 1
        assert summary["wait_for_straggler_median(s)"] == pytest.approx(balance.waiting_for_straggler[0])
