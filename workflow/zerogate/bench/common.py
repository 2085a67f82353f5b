"""What the benchmarks share: a profile's run prepared outside Snakemake, and the launcher call."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from zerogate.data.dataset import prepare
from zerogate.plan.ds_config import render
from zerogate.io import write_json
from zerogate.config.settings import training_settings
from zerogate.plan.variants import slowest_rank_step_times
from zerogate.plan.probe import probe
from zerogate.config.profile import load_profile_chain, resolve_profile

REPO = Path(__file__).resolve().parents[3]


def parse_and_prepare(doc: str | None, argv: list[str] | None) -> tuple[argparse.Namespace, Path, dict[str, Path]]:
    """The benchmarks' shared command line (profile, steps, repeats, work directory) and their prepared run."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-tiny")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zerogate-bench-"))
    return args, workdir, prepare_run(args.profile, workdir, args.steps)


def prepare_run(profile_name: str, workdir: Path, steps: int) -> dict[str, Path]:
    """Dataset, rendered DeepSpeed config, run spec and training settings of a profile, as the pipeline makes them,
    with ``steps`` optimizer steps and no checkpoints (they are not what is timed)."""
    profile = resolve_profile(load_profile_chain(REPO / "config/profiles", profile_name, "--profile", "profile"))
    profile["training"]["optimizer_steps"] = steps
    profile["training"]["warmup_steps_excluded"] = min(profile["training"]["warmup_steps_excluded"], steps // 3)
    template = REPO / profile["deepspeed"]["template"]
    # render reads the accelerator and cores, not the measured bandwidths: skip measuring them.
    ds_config, _, run_spec = render(json.loads(template.read_text()), profile, probe(measure=False), str(template))
    settings = training_settings(profile)
    settings["checkpoint"]["every_steps"] = 0
    paths = {"dataset": workdir / "dataset", "ds_config": workdir / "ds_config.json",
             "run_spec": workdir / "run_spec.json", "settings": workdir / "settings.json"}
    if not (paths["dataset"] / "manifest.json").exists():
        prepare(profile["dataset"], paths["dataset"])
    for key, value in (("ds_config", ds_config), ("run_spec", run_spec), ("settings", settings)):
        write_json(paths[key], value)
    return paths


def launch(paths: dict[str, Path], out: Path, module: str = "zerogate.train.loop", extra: list[str] | None = None) -> None:
    """``module`` under DeepSpeed's launcher with the run spec's ranks and thread environment."""
    command = [sys.executable, "-m", "zerogate.train.launch", "--run-spec", str(paths["run_spec"]), "--log",
               str(out / "launch.log"), "--module", module, "--", "--ds-config", str(paths["ds_config"]),
               "--settings", str(paths["settings"]), "--dataset-dir", str(paths["dataset"]), "--out-dir", str(out),
               "--checkpoint-dir", str(out / "checkpoints"), *(extra or [])]
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, env={**os.environ, "TQDM_DISABLE": "1"}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"zerogate: benchmark run failed; see {out / 'launch.log'}")


def timed_steps(out: Path) -> list[float]:
    """Step times of the slowest rank per step, warm-up excluded."""
    records = [json.loads(line) for path in sorted((out / "metrics").glob("rank*.jsonl"))
               for line in path.read_text().splitlines()]
    per_step = slowest_rank_step_times(records)
    return [per_step[s] for s in sorted(per_step)]


def median(values: list[float]) -> float:
    return statistics.median(values)


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())
