"""Who waits for whom, on real DeepSpeed ranks: the two-node run (tests/integration/conftest.py) has its rank
1
made slow by the `slow` fault injection; its report must name rank 1 the straggler and rank 0 the rank that
waits for it. (The unperturbed smoke run, with no straggler, is tests/integration/test_pipeline.py's.)"""

from __future__ import annotations

import re

import pytest

from tests.unit.helpers import settings
from zerogate.analysis.parse import read_steps
from zerogate.analysis.rank_balance import rank_balance
from zerogate.contracts.report import RunRegistry
from zerogate.contracts.run import TrainSettings

pytestmark = pytest.mark.integration


def verdict_line(results) -> str:
    """The Ranks verdict of the run's report."""
    (page,) = [p.read_text() for p in (results / "report").glob("zerogate-v*.html")]
    return re.sub(r"\s+", " ", re.search(r"<p id='ranks-verdict'>(.*?)</p>", page, re.S).group(1))


def test_a_slow_rank_is_named_the_straggler_and_the_other_waits_for_it(two_node_run, smoke_profile):
    results = two_node_run.results
    training = settings(smoke_profile).training
    accumulation, warmup = training.gradient_accumulation_steps, training.warmup_steps_excluded
    injected = two_node_run.delay_s * accumulation  # extra seconds per optimizer step on rank 1
    inject = TrainSettings.read(results / "train/settings.json").stabiliser.inject
    assert inject == {"kind": "slow", "rank": 1, "seconds": two_node_run.delay_s}

    steps = read_steps(results / "parsed/steps.parquet")
    balance = rank_balance(steps, warmup, world_size=2)
    assert balance.measured, balance.problems
    assert balance.straggler == 1 and balance.next_slowest == 0
    # The injected time is rank 1's compute, and rank 0 spends it waiting in collectives.
    assert 0.5 * injected < balance.excess < 1.5 * injected, balance.evidence()
    assert 0.5 * injected < balance.waiting_for_straggler[0] < 1.5 * injected, balance.evidence()
    assert balance.wait[1] < 0.25 * injected, balance.evidence()

    line = verdict_line(results)
    assert line.startswith("The slowest rank is <b>rank 1</b>"), line
    assert "The others wait for it: rank 0 waits" in line and "rank 1 waits" not in line, line
    summary = RunRegistry.read(results / "registry.json").summary
    assert summary.straggler_rank == 1
    assert summary.wait_for_straggler_median_s == pytest.approx(balance.waiting_for_straggler[0])
