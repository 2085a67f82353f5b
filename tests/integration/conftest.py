"""One smoke pipeline per test session: tests read its outputs, or work on a copy of its directory.

Running the DAG end to end (2 CPU ranks over gloo) is the slow part of the suite, so it happens once, in the
background from the first test on (tests/conftest.py: smoke_run_started), while the unit tests run. A
test that needs a changed run works on a copy of the finished directory (git, Snakemake's metadata and
results: SmokeRun.copy) and lets Snakemake redo only what its change touches; the run itself never changes.

One other pipeline trains: the two-node run (profile cpu-2node, background.start_two_node_run), started in
the background the moment the smoke run has ended (tests/conftest.py), through the Slurm executor where a
cluster answers. Its rank 1
is made a straggler, so it serves tests/integration/test_two_nodes.py, test_ranks.py and test_slurm.py,
which run last.

The heaviest fixtures that change nothing of the smoke run (the GPU check's CPU mode, the peers' and the
stabiliser policies' launches, the claimed box's plans, the user's dataset trained) are built in the
background from the moment the smoke run has ended, one after the other, while the unit tests and the
integration tests before them run (tests/integration/prefetch.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.integration import prefetch
from tests.integration.background import BackgroundRun, SmokeRun, TwoNodeRun


def pytest_collection_modifyitems(session, config, items):
    """The unit tests first (they run while the smoke run trains in the background), then the integration
    tests, those of the two-node run last (it overlaps everything before them); stable order otherwise."""
    items.sort(key=lambda item: ("integration" in item.path.parts, "two_node_run" in item.fixturenames))


@pytest.fixture(scope="session")
def smoke_run(request, smoke_run_started: BackgroundRun) -> SmokeRun:
    """The smoke profile end to end on machine ``ci-box``. Tests must not change it: copy it first. The
    moment it ended, the two-node run and the prefetched fixtures started building in the background
    (tests/conftest.py, tests/integration/prefetch.py), while the unit tests still ran."""
    code, output = smoke_run_started.wait(timeout=1500)
    assert code == 0, output[-4000:]
    print(
        f"smoke pipeline end to end: {time.monotonic() - smoke_run_started.started:.1f} s (beside the unit "
        "tests)"
    )
    run: SmokeRun = smoke_run_started.follower.result(timeout=300)
    # DeepSpeed's CPU comm op leaves its /dev/shm (RAM) buffers behind, named after the rendezvous port;
    # zerogate.runtime.launch removes them. (Only this run's port: other runs may share the machine.)
    ports = set(re.findall(r"master_port=(\d+)", (run.results / "logs/train.log").read_text()))
    assert ports
    assert not [p for port in ports for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*")]
    request.addfinalizer(prefetch.stop)
    return run


@pytest.fixture(scope="session")
def two_node_run(smoke_run) -> TwoNodeRun:
    """Profile cpu-2node end to end with rank 1 a straggler (background.start_two_node_run)."""
    run = smoke_run.two_node
    code, output = run.background.wait(timeout=1800)
    assert code == 0, output[-4000:]
    print(
        f"two-node pipeline (rank 1 a straggler, {'Slurm' if run.through_slurm else 'local'}): "
        f"{time.monotonic() - run.background.started:.1f} s"
    )
    return run
