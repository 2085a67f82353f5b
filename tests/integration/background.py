"""Pipeline runs started in the background, the rest of the suite running meanwhile; their tests wait for
them.

- The shared smoke run starts before the first test (tests/conftest.py) and the unit tests, ordered first,
  run while it trains: much of a pipeline's time is one process at a time starting up, which leaves a core.
- The two-node run starts the moment the smoke run has ended well (a thread waits for it: then_start), while
  the unit tests still run, and the tests that read it run last. Where a Slurm
  cluster answers (CI starts one) it goes through Snakemake's Slurm executor, every rule a Slurm job, and
  mostly waits: the executor polls its queue every few seconds. One run serves the two-node tests, the
  straggler test and the Slurm tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.pipeline import (
    MACHINE,
    STRAGGLER_DELAY_S,
    copy_repo,
    copy_workdir,
    env,
    share_probe,
    snakemake_command,
)

SLURM_MACHINE = "slurm-box"
TWO_NODE_PROFILE = "cpu-2node"


@dataclass
class BackgroundRun:
    process: subprocess.Popen
    workdir: Path
    output: Path  # its stdout and stderr together
    started: float
    follower: Future[Any] | None = None  # what then_start starts once this run has ended well

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, output), once the run has ended (``timeout`` seconds from its start at most)."""
        try:
            code = self.process.wait(timeout=max(1.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        return code, self.output.read_text()

    def stop(self) -> None:
        """Interrupt the run if it is still going (Snakemake then cancels its Slurm jobs), kill it after a
        minute."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start(command: list[str], workdir: Path, output: Path) -> BackgroundRun:
    with open(output, "w") as out:
        process = subprocess.Popen(
            command, cwd=workdir, env=env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return BackgroundRun(process, workdir, output, time.monotonic())


def start_smoke_run(target: Path) -> BackgroundRun:
    """The smoke profile end to end on machine MACHINE, in a committed copy of the repository at
    ``target``."""
    workdir = copy_repo(target)
    return start(
        snakemake_command(profile="smoke", machine=MACHINE), workdir, workdir.with_name(workdir.name + ".log")
    )


def then_start(run: BackgroundRun, follow: Callable[[], Any]) -> None:
    """Call ``follow()`` in a thread the moment ``run`` has ended with exit code 0 (its result, None when the
    run
    failed, is ``run.follower``), so that the next background run starts while the unit tests still run."""

    def wait_then_follow() -> Any:
        return follow() if run.process.wait() == 0 else None

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="after-smoke")
    run.follower = pool.submit(wait_then_follow)
    pool.shutdown(wait=False)


def slurm_answers() -> bool:
    if not shutil.which("sinfo"):
        return False
    shown = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return shown.returncode == 0 and any(
        state.startswith(("idle", "mixed")) for state in shown.stdout.split()
    )


@dataclass(frozen=True)
class TwoNodeRun:
    background: BackgroundRun
    results: Path  # results/cpu-2node/<machine>
    through_slurm: bool  # every rule a Slurm job (SLURM_MACHINE), else run locally (MACHINE)
    delay_s: float = STRAGGLER_DELAY_S  # the straggler injection: rank 1 sleeps this long per micro-step

    @property
    def workdir(self) -> Path:
        return self.background.workdir


@dataclass(frozen=True)
class SmokeRun:
    workdir: Path  # a committed copy of the repository, the pipeline run in it
    results: Path  # results/smoke/<MACHINE>
    two_node: TwoNodeRun | None = None  # started from this one once it was done, when a test needs it

    def copy(self, target: Path) -> tuple[Path, Path]:
        """The finished run copied whole to ``target`` (git, Snakemake's metadata, results, file times kept),
        for a test that changes it: (working directory, results directory). Snakemake in the copy finds the
        run up to date (no rule's params hold the checkout's path) and redoes only what the test changes, so
        tests that change the run work side by side, each in its own copy."""
        workdir = copy_workdir(self.workdir, target)
        return workdir, workdir / self.results.relative_to(self.workdir)

    def share_probe(self, workdir: Path, profile: str, machine: str) -> None:
        share_probe(self.results, workdir, profile, machine)


def start_two_node_run(
    finished_smoke_workdir: Path, smoke_results: Path, target: Path, through_slurm: bool
) -> TwoNodeRun:
    """Profile cpu-2node (two launchers on one machine, one rank each) end to end, in a copy of the smoke
    run's
    directory under another machine name, with rank 1 made a straggler by the `slow` injection. The
    injection only sleeps, outside every collective: the training stays the one-node smoke run's, step for
    step. ``through_slurm``: through profiles/slurm, every rule a Slurm job, the probe included (successful
    jobs keep their Slurm logs, the evidence that each rule ran as one); else locally, the smoke run's
    probe reused."""
    workdir = copy_workdir(finished_smoke_workdir, target)
    machine = SLURM_MACHINE if through_slurm else MACHINE
    if not through_slurm:
        share_probe(smoke_results, workdir, TWO_NODE_PROFILE, machine)
    profile = workdir / f"config/profiles/{TWO_NODE_PROFILE}.yaml"
    profile.write_text(
        profile.read_text()
        + f"stabiliser:\n  inject: {{kind: slow, rank: 1, seconds: {STRAGGLER_DELAY_S}}}\n"
    )
    if through_slurm:
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "--workflow-profile",
            "profiles/slurm",
            "--slurm-keep-successful-logs",
            "--config",
            f"profile={TWO_NODE_PROFILE}",
            f"machine={machine}",
        ]
    else:
        command = snakemake_command(profile=TWO_NODE_PROFILE, machine=machine)
    return TwoNodeRun(
        start(command, workdir, workdir.with_name(workdir.name + ".log")),
        workdir / "results" / TWO_NODE_PROFILE / machine,
        through_slurm,
    )
