"""Several nodes through DeepSpeed's multi-node launcher, tested on one machine.

Profile cpu-2node is the smoke run with a ``nodes`` section: two launchers on this machine
(``deepspeed --no_ssh --node_rank 0|1``, one CPU rank each, gloo) that meet as one world of two ranks.
The whole DAG runs on it once (tests/integration/conftest.py: two_node_run, with rank 1 made a straggler for
test_ranks.py; the injection only sleeps, so the training is the one-node run's); the kill test then drives
the launcher on that run's files, without the injection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.integration.pipeline import env, shortened_launch
from tests.integration.test_training_run import metrics, wait_for_step
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.report import RunRegistry
from zerogate.contracts.verdicts import NOT_MEASURED, GateVerdicts

pytestmark = pytest.mark.integration


def test_two_launchers_make_one_world_that_trains_as_the_one_node_run(two_node_run, smoke_run):
    results = two_node_run.results
    node0, node1 = (results / "logs/train.log").read_text(), (results / "logs/train.node1.log").read_text()
    # One DeepSpeed launcher per node, each with its own log, meeting as one world of two ranks.
    for node, log in ((0, node0), (1, node1)):
        command = log.splitlines()[0].split()
        assert command[command.index("--node_rank") + 1] == str(node) and "--no_ssh" in command
        assert "dist_world_size=2" in log
    run_meta = RunMeta.read(results / "parsed/run.json")
    assert run_meta.world_size == 2
    for rank in (0, 1):  # each rank says where it ran
        records = metrics(results, rank)
        assert {(r.node, r.local_rank) for r in records} == {(rank, 0)}
    # One fingerprint per node, all in the report.
    assert [n.node for n in run_meta.nodes] == [0, 1] and all(
        n.machine.cpu.logical_cores for n in run_meta.nodes
    )
    report = next((results / "report").glob("zerogate-*.html")).read_text()
    assert "<table id='nodes'>" in report
    # Same world size, seed and data order as the one-node smoke run: the same training, step for step.
    for rank in (0, 1):
        two, one = metrics(results, rank), metrics(smoke_run.results, rank)
        assert [r.step for r in two] == [r.step for r in one] == list(range(1, 41))
        assert max(abs(a.loss - b.loss) / abs(b.loss) for a, b in zip(two, one)) < 1e-5


def test_gates_and_report_are_those_of_a_one_node_run(two_node_run, smoke_run):
    results = two_node_run.results
    two = GateVerdicts.read(results / "gates/verdicts.json")
    one = GateVerdicts.read(smoke_run.results / "gates/verdicts.json")
    assert [g.name for g in two.gates] == [g.name for g in one.gates]
    # A time gate judges an interval: this run's rank 1 is made slow and it runs beside the rest of the suite,
    # so its times may straddle a threshold the one-node run's meet. Each is judged on an interval all the
    # same.
    for a, b in zip(two.gates, one.gates):
        if b.interval is None:
            assert a.verdict == b.verdict, a.name
        else:
            assert a.interval is not None and a.verdict != NOT_MEASURED, a.name
    assert two.gate("ranks_completed").verdict == "PASS"
    assert len(list((results / "report").glob("zerogate-*.html"))) == 1
    assert RunRegistry.read(results / "registry.json").run.world_size == 2


def node_launcher(node: int) -> psutil.Process:
    """The DeepSpeed launcher process of node ``node`` (its command line holds --node_rank <node>)."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if (
            "--node_rank" in cmdline
            and cmdline[cmdline.index("--node_rank") + 1] == str(node)
            and "zerogate.train.loop" in cmdline
        ):
            return process
    raise AssertionError(f"no launcher of node {node} found")


def test_a_dead_node_ends_the_run_in_bounded_time_and_the_rerun_resumes(two_node_run, tmp_path):
    # The two-node run's files in 20 steps (a checkpoint every 10), without its straggler (test_ranks.py's).
    steps = 20
    command = shortened_launch(two_node_run.results, tmp_path, steps, stabiliser={"inject": None})
    out = tmp_path / "train"
    process = subprocess.Popen(
        command, cwd=two_node_run.workdir, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_step(process, out / "metrics/rank0.jsonl", 13)  # past the checkpoint of step 10
    # Node 1 dies: its launcher and its rank, at once (the launcher leads its own process group).
    os.killpg(os.getpgid(node_launcher(1).pid), signal.SIGKILL)
    died = time.monotonic()
    assert process.wait(timeout=300) != 0
    assert time.monotonic() - died < 60, "node 0 kept waiting for the dead node"
    assert not (out / "summary.json").exists()
    assert not node_launcher_alive(0)

    resumed = subprocess.run(
        command, cwd=two_node_run.workdir, env=env(), capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    summary = TrainSummary.read(out / "summary.json")
    assert summary.world_size == 2 and summary.resumed_from_step == 10
    for rank in (0, 1):  # every step exactly once per rank after the resume
        assert [r.step for r in metrics(tmp_path, rank)] == list(range(1, steps + 1))


def node_launcher_alive(node: int) -> bool:
    try:
        node_launcher(node)
    except AssertionError:
        return False
    return True
