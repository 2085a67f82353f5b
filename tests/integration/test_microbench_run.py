"""The shared smoke run's micro-benchmarks (tests/integration/conftest.py): timed by as many processes at once
as the run has ranks on the host, each rate's repeats agreed between them and pooled, and the plan's
step-time terms saying so; the synthetic stacks' engines in one world of those ranks. Reads the run's
outputs; starts no pipeline of its own."""

from __future__ import annotations

import pytest

from zerogate.contracts.microbench import Microbench
from zerogate.contracts.plan import Plan
from zerogate.contracts.run import RunSpec
from zerogate.runtime.microbench import MIN_REPEATS

pytestmark = pytest.mark.integration


def test_every_rate_pools_the_same_repeats_of_each_rank_of_the_host(smoke_run):
    spec = RunSpec.read(smoke_run.results / "deepspeed/run_spec.json")
    bench = Microbench.read(smoke_run.results / "plan/microbench.json")
    assert spec.accelerator == "cpu" and spec.nodes is None
    assert bench.ranks_at_once == spec.world_size == 2
    spreads = [r.rate for r in [*bench.matmuls, *bench.copies, *bench.optimizer]]
    spreads += [r.time for r in [*bench.module_overhead, *bench.operator_chains]]
    assert bench.module_overhead and bench.operator_chains
    for spread in spreads:  # as many repeats from each process: the lockstep agreed on every rate's count
        assert len(spread.samples) >= MIN_REPEATS * 2 and len(spread.samples) % 2 == 0, spread
    replanned = Plan.read(smoke_run.results / "plan/plan_measured.json")
    sources = [term.source for term in replanned.step_time.terms]
    assert any("timed by 2 processes at once as the run's ranks on the host" in source for source in sources)


def test_the_stacks_engines_ran_in_one_world_of_the_hosts_ranks_and_the_plan_says_so(smoke_run):
    bench = Microbench.read(smoke_run.results / "plan/microbench.json")
    worlds = {(row.engine, row.world) for row in bench.module_overhead}
    assert worlds == {("deepspeed", 2), ("eager", 1)}
    assert "engine (a world of 2 rank(s), its collectives' time taken out)" in bench.how
    replanned = Plan.read(smoke_run.results / "plan/plan_measured.json")
    sources = [term.source for term in replanned.step_time.terms]
    assert any("in a world of 2 ranks, the time blocked in its collectives taken out" in s for s in sources)
