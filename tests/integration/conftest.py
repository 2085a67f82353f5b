"""One smoke pipeline per test session: tests read its outputs, or work on a copy of its directory.

Running the DAG end to end (2 CPU ranks over gloo) is the slow part of the suite, so it happens once. A
test that needs a changed run borrows the finished directory (git, Snakemake's metadata and results; a
pristine copy is put back afterwards) and lets Snakemake redo only what its change touches.

The Slurm run (tests/integration/test_slurm.py) spends most of its minutes waiting for the executor's
status checks: it starts in the background as soon as the smoke run is done, and its tests run last.
"""

from __future__ import annotations

import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.background import SLURM_TESTS, BackgroundRun, slurm_answers, start_slurm_run
from tests.integration.pipeline import MACHINE, copy_repo, copy_workdir, snakemake


def pytest_collection_modifyitems(session, config, items):
    """The Slurm tests last (stable order otherwise): their run overlaps everything before them."""
    items.sort(key=lambda item: item.path.name == SLURM_TESTS)


@dataclass(frozen=True)
class SmokeRun:
    workdir: Path  # a committed copy of the repository, the pipeline run in it
    results: Path  # results/smoke/<MACHINE>
    background: dict[str, BackgroundRun] = field(default_factory=dict)  # runs started from this one

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
        """Give another run in ``workdir`` this run's hardware probe (it does not depend on the profile),
        so Snakemake there skips the probe's seconds of measuring."""
        shutil.copytree(self.results / "probe", workdir / "results" / profile / machine / "probe")


@pytest.fixture(scope="session")
def smoke_run(request, tmp_path_factory) -> SmokeRun:
    """The smoke profile end to end on machine ``ci-box``. Tests must not change it: copy it first."""
    workdir = copy_repo(tmp_path_factory.mktemp("zerogate-smoke"))
    started = time.monotonic()
    done = snakemake(workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"smoke pipeline end to end: {time.monotonic() - started:.1f} s")
    results = workdir / "results" / "smoke" / MACHINE
    # DeepSpeed's CPU comm op leaves its /dev/shm (RAM) buffers behind, named after the rendezvous port;
    # zerogate.train.launch removes them. (Only this run's port: other runs may share the machine.)
    ports = set(re.findall(r"master_port=(\d+)", (results / "logs/train.log").read_text()))
    assert ports
    assert not [p for port in ports for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*")]
    run = SmokeRun(workdir, results)
    if any(item.path.name == SLURM_TESTS for item in request.session.items) and slurm_answers():
        slurm = run.background["slurm"] = start_slurm_run(workdir, tmp_path_factory.mktemp("zerogate-slurm"))
        request.addfinalizer(slurm.stop)
    return run
