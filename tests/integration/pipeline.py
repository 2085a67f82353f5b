"""Helpers for the integration tests: a committed copy of the repository, and Snakemake run in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MACHINE = "ci-box"


def copy_repo(target: Path) -> Path:
    """The workflow, its configuration and environments, committed in a fresh git repository at ``target``."""
    for name in ("Snakefile", "workflow", "config", "envs", "profiles"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, target / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "test copy"], cwd=target, check=True)
    return target


def copy_workdir(source: Path, target: Path) -> Path:
    """A working directory copied whole: git, Snakemake's metadata, results, file times kept."""
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    return target


def env() -> dict[str, str]:
    # The rules call `python` and `deepspeed`: the ones of this test's environment.
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def snakemake_command(*args: str, targets: tuple[str, ...] = (), profile: str | None = "smoke",
                      machine: str | None = MACHINE) -> list[str]:
    """``args`` follow the --config entries, so a bare "strict=True" is one more of them."""
    config = [f"profile={profile}"] * (profile is not None) + [f"machine={machine}"] * (machine is not None)
    return [sys.executable, "-m", "snakemake", "--cores", "2", *targets, *(["--config", *config] if config else []), *args]


def snakemake(workdir: Path, *args: str, targets: tuple[str, ...] = (), profile: str | None = "smoke",
              machine: str | None = MACHINE, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_command(*args, targets=targets, profile=profile, machine=machine), cwd=workdir,
                          env=env(), capture_output=True, text=True, timeout=timeout)


def refused(done: subprocess.CompletedProcess) -> str:
    """The single zerogate error line of a refused invocation."""
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("zerogate: error:")]
    assert len(lines) == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]
