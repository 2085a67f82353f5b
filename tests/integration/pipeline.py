"""Helpers for the integration tests: a committed copy of the repository, and Snakemake run in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from zerogate.contracts.run import DsConfig, RunSpec, TrainSettings

REPO = Path(__file__).resolve().parents[2]
MACHINE = "ci-box"
# The straggler of the two-node run (conftest.two_node_run): seconds rank 1 sleeps per micro-step. Small, so
# the run costs little, and far above the unperturbed ranks' imbalance (test_pipeline.py checks that margin).
STRAGGLER_DELAY_S = 0.05


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


def share_probe(results: Path, workdir: Path, profile: str, machine: str) -> None:
    """Give another run in ``workdir`` the hardware probe of the run in ``results`` (a probe does not depend
    on
    the profile), so Snakemake there skips the probe's seconds of measuring."""
    shutil.copytree(results / "probe", workdir / "results" / profile / machine / "probe")


# The environment as the session began. Runs start in the background while unit tests run, and a unit test
# may meanwhile set a torch.distributed world in this process's environment (tests/conftest.py:
# one_rank_world), which no pipeline run must inherit.
SESSION_ENV = dict(os.environ)


def env() -> dict[str, str]:
    # The rules call `python` and `deepspeed`: the ones of this test's environment.
    return {**SESSION_ENV, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{SESSION_ENV['PATH']}"}


def snakemake_command(
    *args: str, targets: tuple[str, ...] = (), profile: str | None = "smoke", machine: str | None = MACHINE
) -> list[str]:
    """``args`` follow the --config entries, so a bare "strict=True" is one more of them."""
    config = [f"profile={profile}"] * (profile is not None) + [f"machine={machine}"] * (machine is not None)
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--cores",
        "2",
        *targets,
        *(["--config", *config] if config else []),
        *args,
    ]


def snakemake(
    workdir: Path,
    *args: str,
    targets: tuple[str, ...] = (),
    profile: str | None = "smoke",
    machine: str | None = MACHINE,
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_command(*args, targets=targets, profile=profile, machine=machine),
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refused(done: subprocess.CompletedProcess) -> str:
    """The single zerogate error line of a refused invocation."""
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("zerogate: error:")]
    assert len(lines) == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# What a shortened launch evaluates: before and after training, on a few rows. These launches test training
# (policies, engines, nodes); the evaluation's own tests read the pipeline runs, which evaluate as configured.
SHORT_EVALUATION = {"validation_rows": 8, "exact_match_items": 2}


def copy_run_results(workdir: Path, results: Path, target: Path) -> Path:
    """The finished run's results (``results``, under ``workdir``) copied to the same place under ``target``,
    its checkpoints left out; returns the copy's results directory. A launch with ``target`` as its working
    directory reads only the copy (the dataset's manifest names its tokenizer relative to the working
    directory), never the run's directory."""
    copy = target / results.relative_to(workdir)
    shutil.copytree(results, copy, ignore=shutil.ignore_patterns("checkpoints"))
    return copy


Launched = TypeVar("Launched")


def side_by_side(
    root: Path, workdir: Path, results: Path, launches: Mapping[str, Callable[[Path, Path, Path], Launched]]
) -> Callable[[], dict[str, Launched]]:
    """Launches that run at once, each ``launch(inputs_dir, inputs_results, out)`` on one copy (under
    ``root``) of a finished run's rendered files and dataset, into ``root / name``: the copy is made now, the
    launches when the returned function is called (a prefetched fixture's build)."""
    inputs = copy_run_results(workdir, results, root / "inputs")

    def build() -> dict[str, Launched]:
        with ThreadPoolExecutor(max_workers=len(launches)) as pool:
            futures = {
                name: pool.submit(launch, root / "inputs", inputs, root / name)
                for name, launch in launches.items()
            }
            return {name: future.result() for name, future in futures.items()}

    return build


def shortened_launch(
    results: Path, out: Path, steps: int, stabiliser: dict | None = None, checkpoint: dict | None = None
) -> list[str]:
    """The command that runs zerogate.runtime.launch directly (no Snakemake) on a finished run's rendered
    files and dataset, shortened to ``steps`` optimizer steps, with ``stabiliser`` and ``checkpoint`` settings
    changed and the evaluation made short (SHORT_EVALUATION). The changed files, the log (train.log), the
    outputs (train/) and checkpoints go under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    spec = RunSpec.read(results / "deepspeed/run_spec.json")
    spec.model_copy(update={"training": spec.training.model_copy(update={"optimizer_steps": steps})}).write(
        out / "run_spec.json"
    )
    ds_config = DsConfig.read(results / "deepspeed/ds_config.json").raw
    ds_config["scheduler"]["params"]["total_num_steps"] = steps
    (out / "ds_config.json").write_text(json.dumps(ds_config))
    settings = TrainSettings.read(results / "train/settings.json")
    settings.model_copy(
        update={
            "stabiliser": settings.stabiliser.model_copy(update=stabiliser or {}),
            "checkpoint": settings.checkpoint.model_copy(update=checkpoint or {}),
            "evaluation": settings.evaluation.model_copy(update={"every_steps": steps, **SHORT_EVALUATION}),
        }
    ).write(out / "settings.json")
    return [
        sys.executable,
        "-m",
        "zerogate.runtime.launch",
        "--run-spec",
        str(out / "run_spec.json"),
        "--log",
        str(out / "train.log"),
        "--",
        "--ds-config",
        str(out / "ds_config.json"),
        "--settings",
        str(out / "settings.json"),
        "--dataset-dir",
        str(results / "dataset"),
        "--out-dir",
        str(out / "train"),
        "--checkpoint-dir",
        str(out / "checkpoints"),
    ]
