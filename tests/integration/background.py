"""A pipeline run started in the background, for a run that mostly waits (the Slurm executor polls its
queue every few seconds): the rest of the suite runs meanwhile, and the run's own tests wait for it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.pipeline import copy_workdir, env

SLURM_MACHINE = "slurm-box"
SLURM_TESTS = "test_slurm.py"  # their module; tests/integration/conftest.py runs them last


@dataclass
class BackgroundRun:
    process: subprocess.Popen
    workdir: Path
    output: Path  # its stdout and stderr together
    started: float

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, output), once the run has ended (``timeout`` seconds from its start at most)."""
        try:
            code = self.process.wait(timeout=max(1.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        return code, self.output.read_text()

    def stop(self) -> None:
        """Interrupt the run if it is still going (Snakemake then cancels its Slurm jobs), kill it after a minute."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def slurm_answers() -> bool:
    if not shutil.which("sinfo"):
        return False
    shown = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return shown.returncode == 0 and any(state.startswith(("idle", "mixed")) for state in shown.stdout.split())


def start_slurm_run(finished_smoke_workdir: Path, target: Path) -> BackgroundRun:
    """The smoke profile through profiles/slurm (every rule a Slurm job), in a copy of the smoke run's
    directory under another machine name, so every rule runs again."""
    workdir = copy_workdir(finished_smoke_workdir, target)
    output = workdir / "slurm-run.log"
    # Successful jobs keep their Slurm logs: they are the evidence that each rule ran as a Slurm job.
    command = [sys.executable, "-m", "snakemake", "--workflow-profile", "profiles/slurm",
               "--slurm-keep-successful-logs", "--config", "profile=smoke", f"machine={SLURM_MACHINE}"]
    with open(output, "w") as out:
        process = subprocess.Popen(command, cwd=workdir, env=env(), stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    return BackgroundRun(process, workdir, output, time.monotonic())
