"""The micro-benchmarks timed by the host's ranks at once (zerogate.predict.microbench_together): each rate's
repeats in lockstep, as many in every process as the fewest any chose; the processes' repeats pooled into one
spread; a companion's failure named; one process on a GPU."""

from __future__ import annotations

import multiprocessing
import statistics
import subprocess
import sys
import textwrap
import time

import pytest

from tests.unit.helpers import REPO
from tests.unit.test_microbench import bench, spread
from zerogate.contracts.run import NodesSpec, RunSpec
from zerogate.predict.microbench_together import Peers, pooled, ranks_on_host
from zerogate.robust import quartiles
from zerogate.runtime import microbench as runtime_microbench
from zerogate.runtime.microbench import MIN_REPEATS, in_lockstep, rate_samples


class Recorded:
    """A lockstep that records each proposal and answers the ones given, in order (the start's 0, the calls
    a repeat, the repeats)."""

    def __init__(self, *answers: int) -> None:
        self.answers, self.proposals = list(answers), []

    def agree(self, count: int) -> int:
        self.proposals.append(count)
        return self.answers[len(self.proposals) - 1]


def test_a_rate_in_lockstep_waits_at_its_start_and_times_the_calls_and_repeats_the_peers_agree(monkeypatch):
    monkeypatch.setattr(runtime_microbench, "REPEAT_S", 0.0005)
    calls = []
    peers = Recorded(0, 7, MIN_REPEATS)
    with in_lockstep(peers):
        samples = rate_samples(lambda: calls.append(sum(range(100))), 1.0, budget_s=1.0)
    assert peers.proposals[0] == 0 and peers.proposals[2] > MIN_REPEATS  # the budget allowed more
    assert len(peers.proposals) == 3 and len(samples.rates) == MIN_REPEATS
    # The warm-up and sizing calls, then the untimed batch and every repeat at the 7 calls agreed: an
    # operation with collectives between the processes is called as often in each.
    assert len(calls) == 2 + 7 * (1 + MIN_REPEATS)
    alone = rate_samples(lambda: sum(range(100)), 1.0, budget_s=1.0)  # the lockstep ends with the block
    assert len(alone.rates) == runtime_microbench.REPEATS


def test_the_seconds_counted_outside_are_taken_out_of_each_repeat(monkeypatch):
    monkeypatch.setattr(runtime_microbench, "REPEAT_S", 0.002)
    outside = [0.0]

    def blocked_half_the_time() -> None:
        started = time.perf_counter()
        while time.perf_counter() - started < 0.0002:
            pass
        # As a clock that counted half of the call blocked in a collective (half of what it took, however
        # long a loaded machine made it).
        outside[0] += (time.perf_counter() - started) / 2

    whole = rate_samples(blocked_half_the_time, 1.0, budget_s=0.05)
    rest = rate_samples(blocked_half_the_time, 1.0, budget_s=0.05, excluded=lambda: outside[0])
    ratio = statistics.median(rest.rates) / statistics.median(whole.rates)
    assert 1.6 < ratio < 2.5  # about twice the calls per second once half of each call is left out


def _propose(peers: Peers, count: int, results) -> None:
    results.put((peers.rank, [peers.agree(count), peers.agree(count + 10)]))


def test_forked_peers_agree_on_the_fewest_repeats_any_proposed():
    context = multiprocessing.get_context("fork")
    barrier, proposals, results = context.Barrier(3), context.Array("i", 3), context.Queue()
    processes = [
        context.Process(target=_propose, args=(Peers(rank, barrier, proposals, 0), count, results))
        for rank, count in enumerate((5, 3, 4))
    ]
    for process in processes:
        process.start()
    agreed = dict(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    assert agreed == {0: [3, 13], 1: [3, 13], 2: [3, 13]}


def twin(scale: float, cpu_share: float):
    """The test's micro-benchmarks with every rate and time scaled: another process's measurement."""
    one = bench()

    def scaled(value):
        scaled_samples = [sample * scale for sample in value.samples]
        return spread(scaled_samples).model_copy(update={"cpu_share": cpu_share})

    return one.model_copy(
        update={
            "matmuls": [r.model_copy(update={"rate": scaled(r.rate)}) for r in one.matmuls],
            "copies": [r.model_copy(update={"rate": scaled(r.rate)}) for r in one.copies],
            "optimizer": [r.model_copy(update={"rate": scaled(r.rate)}) for r in one.optimizer],
            "seconds_s": 2.0 * scale,
        }
    )


def test_every_processs_repeats_are_pooled_into_one_spread_per_rate():
    first, second = twin(1.0, 0.9), twin(0.5, 0.7)
    together = pooled([first, second])
    assert together.ranks_at_once == 2 and together.seconds_s == 2.0
    for mine, other, both in zip(first.matmuls, second.matmuls, together.matmuls, strict=True):
        assert both.rate.samples == mine.rate.samples + other.rate.samples
        assert (both.rate.q1, both.rate.median, both.rate.q3) == quartiles(both.rate.samples)
        assert both.seconds_per_call == pytest.approx(both.flop_per_call / both.rate.median)
        assert both.rate.cpu_share == pytest.approx(0.8)
    assert together.copies[0].rate.samples == first.copies[0].rate.samples + second.copies[0].rate.samples
    assert together.cpu_share == pytest.approx(0.8)
    assert "timed by 2 processes at once" in together.how


def test_processes_that_timed_different_benchmarks_are_not_pooled():
    first = twin(1.0, 0.9)
    changed = [first.matmuls[0].model_copy(update={"m": 7}), *first.matmuls[1:]]
    other = first.model_copy(update={"matmuls": changed})
    with pytest.raises(ValueError, match="different matrix products at row 0"):
        pooled([first, other])
    with pytest.raises(ValueError, match="numbers of matrix products"):
        pooled([first, first.model_copy(update={"matmuls": []})])


def test_the_ranks_on_this_machine_time_at_once_on_the_cpu_and_one_process_on_a_gpu():
    spec = RunSpec.read(REPO / "tests/data/planner_grid/run_spec.json")
    assert spec.accelerator == "cpu" and spec.nodes is None
    assert ranks_on_host(spec.model_copy(update={"world_size": 2})) == 2
    assert ranks_on_host(spec.model_copy(update={"world_size": 3})) == 3
    assert ranks_on_host(spec.model_copy(update={"accelerator": "cuda", "world_size": 4})) == 1
    # Two nodes that are both this machine (the tests' layout) share its cores; on a cluster, one node's.
    local = NodesSpec(
        mode="no_ssh", hosts=["localhost", "127.0.0.1"], ranks_per_node=1, master_addr="127.0.0.1"
    )
    assert ranks_on_host(spec.model_copy(update={"world_size": 2, "nodes": local})) == 2
    cluster = NodesSpec(mode="slurm", hosts=["node-a", "node-b"], ranks_per_node=4, master_addr="node-a")
    assert ranks_on_host(spec.model_copy(update={"world_size": 8, "nodes": cluster})) == 4


@pytest.mark.parametrize(("failing", "named"), [(1, "companion 1"), (0, "this process")])
def test_the_process_that_failed_first_is_named_and_nobody_waits_for_it(failing, named):
    # In a fresh interpreter: the companions fork before torch is imported, as the rule's script does. The
    # other process waits at the barrier, which the failure breaks: its BrokenBarrierError is not the cause.
    script = textwrap.dedent(
        f"""
        from zerogate.predict import microbench_together as together

        def measure_in_step(peers, *args):
            if peers.rank == {failing}:
                raise OSError("no such op")
            peers.agree(0)
            raise AssertionError("the barrier held")

        together.measure_in_step = measure_in_step
        try:
            together.measure_together(None, None, None, "probe", 2)
        except RuntimeError as error:
            print(str(error).splitlines()[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PYTHONPATH": f"{REPO / 'workflow'}:{REPO}", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == f"the micro-benchmarks failed in {named}: OSError: no such op", done.stderr
