"""One smoke pipeline per test session: tests read its outputs, or work on a copy of its directory.

Running the DAG end to end (2 CPU ranks over gloo) is the slow part of the suite, so it happens once, in the
background from the first test on (tests/conftest.py: smoke_run_started), while the unit tests run. A
test that needs a changed run borrows the finished directory (git, Snakemake's metadata and results; a
pristine copy is put back afterwards) and lets Snakemake redo only what its change touches.

One other pipeline trains: the two-node run (profile cpu-2node, background.start_two_node_run), started in
the background the moment the smoke run has ended (tests/conftest.py), through the Slurm executor where a
cluster answers. Its rank 1
is made a straggler, so it serves tests/integration/test_two_nodes.py, test_ranks.py and test_slurm.py,
which run last.

The heaviest fixtures that read nothing a test changes (the GPU check's CPU mode, the peers' and the
stabiliser policies' launches, the claimed box's plans, the user's dataset trained) are built in the
background from the first integration test on, one after the other, while the tests before them run
(tests/integration/prefetch.py).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration import prefetch
from tests.integration.background import BackgroundRun, TwoNodeRun
from tests.integration.pipeline import MACHINE, copy_workdir, share_probe


def pytest_collection_modifyitems(session, config, items):
    """The unit tests first (they run while the smoke run trains in the background), then the integration
    tests, those of the two-node run last (it overlaps everything before them); stable order otherwise."""
    items.sort(key=lambda item: ("integration" in item.path.parts, "two_node_run" in item.fixturenames))


@dataclass(frozen=True)
class SmokeRun:
    workdir: Path  # a committed copy of the repository, the pipeline run in it
    results: Path  # results/smoke/<MACHINE>
    two_node: TwoNodeRun | None = None  # started from this one once it was done, when a test needs it

    @contextmanager
    def borrowed(self) -> Iterator[tuple[Path, Path]]:
        """The finished run itself, for a test that changes it: (working directory, results directory).

        A pristine copy waits beside it and is put back afterwards. The test works in place rather than on
        a copy elsewhere because rule params hold the repository's absolute path (prepare_model,
        record_provenance): in a moved copy Snakemake would see changed params and retrain everything.
        """
        pristine = copy_workdir(self.workdir, self.workdir.with_name(self.workdir.name + "-pristine"))
        try:
            yield self.workdir, self.results
        finally:
            shutil.rmtree(self.workdir)
            pristine.rename(self.workdir)

    def share_probe(self, workdir: Path, profile: str, machine: str) -> None:
        share_probe(self.results, workdir, profile, machine)


@pytest.fixture(scope="session")
def smoke_run(request, smoke_run_started: BackgroundRun, tmp_path_factory) -> SmokeRun:
    """The smoke profile end to end on machine ``ci-box``. Tests must not change it: copy it first. Once it
    is done, the prefetched fixtures start building in the background (tests/integration/prefetch.py)."""
    code, output = smoke_run_started.wait(timeout=1500)
    assert code == 0, output[-4000:]
    print(
        f"smoke pipeline end to end: {time.monotonic() - smoke_run_started.started:.1f} s (beside the unit "
        "tests)"
    )
    workdir = smoke_run_started.workdir
    results = workdir / "results" / "smoke" / MACHINE
    # DeepSpeed's CPU comm op leaves its /dev/shm (RAM) buffers behind, named after the rendezvous port;
    # zerogate.runtime.launch removes them. (Only this run's port: other runs may share the machine.)
    ports = set(re.findall(r"master_port=(\d+)", (results / "logs/train.log").read_text()))
    assert ports
    assert not [p for port in ports for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*")]
    # The two-node run started once this run had ended (tests/conftest.py): its copy of this directory is
    # taken before any test here can borrow the directory.
    two_node = None if smoke_run_started.follower is None else smoke_run_started.follower.result(timeout=300)
    run = SmokeRun(workdir, results, two_node)
    request.addfinalizer(prefetch.stop)
    prefetch.start(request.session, tmp_path_factory, run)
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
