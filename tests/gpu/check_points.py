"""The GPU check's points (tests/gpu/check_runs.py): the planner grid's ZeRO variants and the held-out points
on one base profile per mode, written as profiles, rendered for this machine as the pipeline's rules render
them, their datasets prepared, and planned by the planner as plan_run plans (so plan.json's figures)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zerogate.bench.grid_points import write_profiles
from zerogate.config.launch import PlanSettings
from zerogate.config.machines import GpuDescription
from zerogate.config.profile import check_profile, deep_merge, load_profile_chain, resolve_profile
from zerogate.config.settings import ProfileSettings
from zerogate.contracts.base import plain
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import DsConfig, RunSpec, TrainSettings
from zerogate.data.prepare import prepare
from zerogate.predict.planner import plan_for_run
from zerogate.render.claim import read_claim
from zerogate.render.ds_config import RenderInputs, render

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "config/profiles"
# The claimed box as the claim states it: its cards' capacities cap the device in the micro-batch search.
CLAIMED_BOX = REPO / "config/machines/claim-as-stated-rtx5070-8gb-rtx4090.yaml"
# The grid's points: ZeRO variants (zerogate.render.variants), in the order they run.
POINTS = ("zero3", "zero3-offload", "zero3-offload-all", "zero2-offload")
# What each mode trains on: the base profile and what every point sets on top of it (short runs, one rank,
# no accumulation, no checkpoints, evaluation on two rows before and after).
SHORT_RUN = {
    "dataset": {"num_train": 256, "num_validation": 8},
    "training": {
        "cpu_ranks": 1,
        "gradient_accumulation_steps": 1,
        "warmup_steps_excluded": 0,
        "lr_warmup_steps": 1,
    },
    "evaluation": {"every_steps": 1000, "validation_rows": 2, "exact_match_items": 0},
    "checkpoint": {"every_steps": 0},
}
BASES = {
    # gpu-1x's Qwen2.5-0.5B shape, built from its numbers (random weights: nothing to download).
    "cuda": ("gpu-1x", {"model": {"source": "shape"}, "dataset": {"template": "plain"}}),
    "cpu": ("cpu-tiny", {}),
}
# Optimizer steps of each point's run, and of each micro-batch the search tries: on CUDA, fp16's dynamic loss
# scale skipped the first 3 updates on the lent H200 (overflows while the scale came down from 2**16).
STEPS = {"cuda": 6, "cpu": 2}
PROBE_STEPS = {"cuda": 5, "cpu": 2}
# Held-out points (GPU mode only): other architectures, sizes, sequence lengths, micro-batches and activation
# checkpointing than POINTS', each trained once; their plans are recorded before the run that checks them.
HELD_OUT = REPO / "tests/gpu/held_out_points.yaml"


@dataclass(frozen=True)
class Point:
    """One setting: its grid point (ZeRO variant), profile file, settings and rendered files."""

    name: str
    profile: Path
    settings: ProfileSettings
    ds_config: Path
    run_spec: Path
    train_settings: Path


def held_out_points() -> list[dict[str, Any]]:
    """The held-out points (HELD_OUT): id, ZeRO variant and overrides of each."""
    return yaml.safe_load(HELD_OUT.read_text())["points"]


def write_grid(work: Path, kind: str, held_out: list[dict[str, Any]] | None = None) -> dict[str, Path]:
    """The points' profiles (zerogate.bench.grid_points.write_profiles on a grid written here): the grid's
    variants, then the ``held_out`` points (held_out_points()) with their overrides on the same short run;
    point -> profile file."""
    base, base_overrides = BASES[kind]
    shared = functools.reduce(
        deep_merge, (SHORT_RUN, base_overrides, {"training": {"optimizer_steps": STEPS[kind]}})
    )
    points = [{"id": name, "zero": name, "overrides": shared} for name in POINTS]
    points += [
        {"id": point["id"], "zero": point["zero"], "overrides": deep_merge(shared, point["overrides"])}
        for point in held_out or []
    ]
    grid_file = work / "gpu_check_grid.yaml"
    grid_file.write_text(yaml.safe_dump({"base": base, "points": points}, sort_keys=False))
    written = write_profiles(REPO, work / "profiles", str(grid_file))
    return dict(zip([point["id"] for point in points], written, strict=True))


def prepare_datasets(points: dict[str, Point], work: Path) -> dict[str, Path]:
    """Each point's dataset folder: one per distinct ``dataset`` setting (the held-out points' sequence
    lengths differ), prepared as the prepare_dataset rule prepares a shape-only model's."""
    folders: dict[str, Path] = {}
    by_point = {}
    for name, point in points.items():
        key = json.dumps(plain(point.settings.dataset), sort_keys=True)
        if key not in folders:
            folders[key] = work / f"dataset-{len(folders)}"
            prepare(point.settings.dataset, folders[key], profile_file="the GPU check's grid")
        by_point[name] = folders[key]
    return by_point


def load_settings(profile: Path) -> ProfileSettings:
    chain = load_profile_chain(PROFILES, str(profile), "the GPU check", "profile")
    return check_profile(resolve_profile(chain), chain, REPO)


def with_micro_batch(profile: Path, micro_batch: int, steps: int) -> Path:
    """A profile extending ``profile`` with another micro-batch and step count (the search's)."""
    path = profile.with_name(f"{profile.stem}-mb{micro_batch}.yaml")
    path.write_text(
        yaml.safe_dump(
            {
                "extends": str(profile),
                "training": {"micro_batch_per_rank": micro_batch, "optimizer_steps": steps},
            }
        )
    )
    return path


def render_point(name: str, profile: Path, fingerprint: Fingerprint, out: Path) -> Point:
    """The point's DeepSpeed config, run spec and training settings, rendered for this machine as the
    render_deepspeed_config and write_train_settings rules render them."""
    settings = load_settings(profile)
    out.mkdir(parents=True, exist_ok=True)
    ds_config, _, run_spec = render(
        read_claim(REPO / settings.deepspeed.template),
        RenderInputs(
            model=settings.model,
            training=settings.training.run,
            overrides=settings.deepspeed.overrides,
            seq_len=settings.dataset.seq_len,
            vocab_size=settings.vocab_size,
            fingerprint=fingerprint,
            template_file=settings.deepspeed.template,
            profile_file=str(profile),
        ),
    )
    (out / "ds_config.json").write_text(json.dumps(ds_config, indent=2) + "\n")
    run_spec.write(out / "run_spec.json")
    TrainSettings.of(
        {
            "stabiliser": plain(settings.stabiliser),
            "checkpoint": plain(settings.checkpoint),
            "evaluation": plain(settings.evaluation),
        },
        "the profile's settings",
    ).write(out / "settings.json")
    return Point(
        name, profile, settings, out / "ds_config.json", out / "run_spec.json", out / "settings.json"
    )


def plan_point(point: Point, machine: Any) -> Any:
    """The planner's plan of the point on ``machine`` (plan_run's function, so plan.json's figures)."""
    return plan_for_run(
        RunSpec.read(point.run_spec),
        DsConfig.read(point.ds_config),
        machine,
        point.settings.plan or PlanSettings(),
        point.name,
    )


def capped_machine(machine: Any, card: GpuDescription) -> Any:
    """``machine`` with its GPU replaced by ``card`` (a consumer card of the claimed box)."""
    return machine.model_copy(update={"gpus": [card], "name": f"{machine.name}-as-{card.name}"})
