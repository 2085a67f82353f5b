"""The GPU check's runs (started by tests/gpu/gpu_check.py, which installs the kit first): short training
runs of one rank through zerogate's own launcher and loop, each beside the planner's prediction of it.

The settings are a planner grid (zerogate.bench.grid_points: each point a ZeRO variant of
zerogate.render.variants on one base profile, checked as the pipeline checks a profile): ZeRO-3 without
offload, with the optimizer offloaded, with both offloads, and ZeRO-2 with the optimizer offloaded. On a GPU
the base is gpu-1x (Qwen2.5-0.5B's shape, randomly initialised, fp16 with dynamic loss scaling); in CPU mode
cpu-tiny (a tiny Llama, fp32 on DeepSpeed's CPU accelerator over gloo). Each point is rendered
(zerogate.render.ds_config.render), planned (zerogate.predict.planner.plan_for_run, what plan.json holds)
and trained a few optimizer steps by zerogate.runtime.launch on tests/gpu/capped_loop.py (the loop of
zerogate.train.loop), whose step records (zerogate.contracts.records.StepRecord) give each step's tensor
peak, allocator peak, NVML device peak, step time and loss scale. Then, per point and per consumer card of
the claimed box (config/machines/, the small card first), the card's capacity caps the device and the
largest micro-batch that trains is searched from the plan's own largest, against it
(tests/gpu/micro_batch_search.py).

Everything runs against a wall-clock deadline: a launch that would not end before it is skipped and
recorded as such. Results (at most 8 files) go to ``--out``: see :mod:`tests.gpu.check_results`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from tests.gpu.capped_loop import CAP_VARIABLE
from tests.gpu.check_results import outside_allocator, probe_cap, step_rows, write_results
from tests.gpu.micro_batch_search import Search, resumed
from zerogate.bench.grid_points import write_profiles
from zerogate.config.launch import PlanSettings
from zerogate.config.machines import GpuDescription, from_fingerprint, load_description
from zerogate.config.profile import check_profile, deep_merge, load_profile_chain, resolve_profile
from zerogate.config.settings import ProfileSettings
from zerogate.contracts.base import plain, read_lines
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.records import StepRecord
from zerogate.contracts.run import DsConfig, RunSpec, TrainSettings
from zerogate.data.prepare import prepare
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.planner import plan_for_run, with_measured_compute
from zerogate.render.claim import read_claim
from zerogate.render.ds_config import RenderInputs, render
from zerogate.runtime.ops import build_cpu_ops, build_env
from zerogate.runtime.probe import probe

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "config/profiles"
# The claimed box as the claim states it: its cards' capacities cap the device in the micro-batch search.
# How far a recorded search's allocator cap may lie from this call's for the search to go on at the recorded
# cap: assumed, 32 MiB, sixteen times the 2 MiB by which the recorded calls' memory outside the allocator
# differed (1,706-1,708 MiB, tests/data/gpu_check/h200-2026-12-04), and under 0.5 % of the smallest card.
RESUME_TOLERANCE_BYTES = 32 * 2**20
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
MICROBENCH_S = 40.0  # what one point's micro-benchmarks are expected to take (imports and the op included)
FIRST_LAUNCH_S = {"cuda": 60.0, "cpu": 20.0}  # what a launch is expected to take before one was timed
# Held-out points (GPU mode only): other architectures, sizes, sequence lengths, micro-batches and activation
# checkpointing than POINTS', each trained once; their plans are recorded before the run that checks them.
HELD_OUT = REPO / "tests/gpu/held_out_points.yaml"
CPU_NO_SEARCH = "not run: CPU mode (no CUDA device to cap)"
OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory")


@dataclass
class Budget:
    """The wall-clock deadline, and what a launch took last (the estimate of the next)."""

    deadline: float
    launch_s: float
    skipped: list[str] = field(default_factory=list)

    def allows(self, what: str, needed: float | None = None) -> bool:
        left = self.deadline - time.time()
        if left >= (needed or self.launch_s):
            return True
        self.skipped.append(f"{what}: {left:.0f} s left, a launch takes about {self.launch_s:.0f} s")
        return False


@dataclass(frozen=True)
class Point:
    """One setting: its grid point (ZeRO variant), profile file, settings and rendered files."""

    name: str
    profile: Path
    settings: ProfileSettings
    ds_config: Path
    run_spec: Path
    train_settings: Path


# --- setting up ------------------------------------------------------------------------------------------


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


def plan_point(point: Point, machine: Any, share_traces: bool = True) -> Any:
    """The planner's plan of the point on ``machine`` (plan_run's function, so plan.json's figures)."""
    return plan_for_run(
        RunSpec.read(point.run_spec),
        DsConfig.read(point.ds_config),
        machine,
        point.settings.plan or PlanSettings(),
        point.name,
        share_traces=share_traces,
    )


def capped_machine(machine: Any, card: GpuDescription) -> Any:
    """``machine`` with its GPU replaced by ``card`` (a consumer card of the claimed box)."""
    return machine.model_copy(update={"gpus": [card], "name": f"{machine.name}-as-{card.name}"})


# --- training ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    outcome: str  # "trained" | "out of memory" | "failed (exit N)"
    seconds: float
    records: list[StepRecord]
    log: str


def runs_environment() -> dict[str, str]:
    """The environment of every process the check starts: this one's, with DeepSpeed's ops built into and
    loaded from this environment (zerogate.runtime.ops.build_env)."""
    return {**os.environ, **build_env()}


def launch(point: Point, dataset: Path, out: Path, deadline: float, cap_bytes: int | None = None) -> Launch:
    """One run of the point through zerogate.runtime.launch (DeepSpeed's launcher, one rank) on
    tests/gpu/capped_loop.py, the device capped at ``cap_bytes`` if given; killed, with every process it
    started, at ``deadline`` (a hung collective must not take the call's results with it)."""
    env = runs_environment()
    env.pop(CAP_VARIABLE, None)
    if cap_bytes is not None:
        env[CAP_VARIABLE] = str(cap_bytes)
    log = out / "train.log"
    command = [sys.executable, "-m", "zerogate.runtime.launch", "--run-spec", str(point.run_spec)]
    command += ["--log", str(log), "--module", "tests.gpu.capped_loop", "--"]
    command += ["--ds-config", str(point.ds_config), "--settings", str(point.train_settings)]
    command += ["--dataset-dir", str(dataset), "--out-dir", str(out / "train")]
    command += ["--checkpoint-dir", str(out / "checkpoints")]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=max(1.0, deadline - time.time()))
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    seconds = time.monotonic() - started
    text = (log.read_text() if log.is_file() else "") + output
    metrics = out / "train/metrics/rank0.jsonl"
    records = read_lines(StepRecord, metrics) if metrics.is_file() and code == 0 else []
    return Launch(outcome_of(code, text, records), seconds, records, text)


def outcome_of(code: int | None, text: str, records: list[StepRecord]) -> str:
    """What a launch came to from its exit status (None: killed), its log and its step records. A run counts
    as trained only if a step updated the weights: fp16's dynamic loss scale skips the first steps' updates
    (an overflow at the initial scale), and the optimizer's states are allocated at the first update, so a
    run of skipped steps never reached its memory peak."""
    if code is None:
        return "killed at the deadline"
    if code != 0:
        return "out of memory" if any(marker in text for marker in OUT_OF_MEMORY) else f"failed (exit {code})"
    if records and all(record.skip_reason is not None for record in records):
        return f"no update: each of its {len(records)} steps skipped ({records[-1].skip_reason})"
    return "trained"


# --- the check ---------------------------------------------------------------------------------------------


def process_memory(kind: str, env: dict[str, str]) -> dict[str, Any]:
    """What a CUDA process holds outside the caching allocator (tests/gpu/process_memory.py, in a process of
    its own): its readings, or why there are none."""
    if kind == "cpu":
        return {"not_run": "CPU mode: no CUDA context"}
    command = [sys.executable, "-m", "tests.gpu.process_memory"]
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return {"not_run": "timed out after 180 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"not_run": f"exit {done.returncode}: {(done.stdout + done.stderr)[-1000:]}"}
    return json.loads(lines[-1])


def build_ops(kind: str) -> dict[str, Any]:
    """Build (or load, when built) the DeepSpeed ops the runs use: on the CPU accelerator
    zerogate.runtime.ops's; on CUDA the fused Adam (ZeRO without optimizer offload) and the CPU Adam
    (optimizer offload), for this card's architecture only. Seconds per op, or the error."""
    os.environ.update(build_env())
    if kind == "cpu":
        return {"seconds": build_cpu_ops()}
    major, minor = torch.cuda.get_device_capability(0)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    # Here, not at the top: DeepSpeed picks its accelerator's builders on import, and in CPU mode
    # DS_ACCELERATOR is set only once main runs.
    from deepspeed.ops.op_builder import CPUAdamBuilder, FusedAdamBuilder

    seconds = {}
    for builder in (FusedAdamBuilder, CPUAdamBuilder):
        started = time.monotonic()
        try:
            builder().load(verbose=False)
        except Exception as error:  # recorded: the runs that need the op then fail on their own
            return {"seconds": seconds, "error": f"{builder.__name__}: {error}"}
        seconds[builder.__name__] = round(time.monotonic() - started, 1)
    return {"seconds": seconds}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="rendered files, datasets, run outputs")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--deadline", type=float, required=True, help="epoch seconds: nothing starts after")
    parser.add_argument("--budget-s", type=float, required=True)
    parser.add_argument("--install-record", type=Path)
    parser.add_argument("--kit-record", type=Path)
    parser.add_argument("--no-search", action="store_true", help="leave the micro-batch search out")
    parser.add_argument(
        "--no-held-out", action="store_true", help="leave the held-out points out (GPU mode; HELD_OUT)"
    )
    parser.add_argument(
        "--search-card",
        help="search only on the claimed box's cards whose name holds this (e.g. 5070; default every card)",
    )
    parser.add_argument(
        "--search-point",
        nargs="+",
        choices=POINTS,
        help="search only these points of the grid (default every one)",
    )
    parser.add_argument(
        "--resume",
        nargs="+",
        type=Path,
        default=[],
        help="recorded checks (folders with micro_batch.json) whose searches go on where they stopped",
    )
    parser.add_argument(
        "--plan-launched",
        action="store_true",
        help="plan only the points this call trains (tests/gpu/replan.py plans any point from the record)",
    )
    parser.add_argument(
        "--launch",
        nargs="+",
        help="the points trained, the grid's (POINTS) or held-out ones (default all); the others are "
        "rendered and planned only",
    )
    return parser.parse_args(argv)


def measure_rates(point: Point, work: Path) -> dict[str, Any]:
    """The point's micro-benchmarks (tests/gpu/microbench_point.py, a process of its own):
    ``{"path": microbench.json, "seconds": ...}``, or ``{"not_run": why}``."""
    out = work / "rendered" / point.name / "microbench.json"
    command = [sys.executable, "-m", "tests.gpu.microbench_point", str(point.run_spec), str(point.ds_config)]
    command += [str(work / "fingerprint.json"), str(out)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=runs_environment(), capture_output=True, text=True)
    if done.returncode != 0:
        return {"not_run": f"exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}"}
    return {"path": str(out), "seconds": round(time.monotonic() - started, 1)}


def train_points(
    points: dict[str, Point], datasets: dict[str, Path], work: Path, budget: Budget, launched: list
) -> list:
    """Each point among ``launched``, within the budget, micro-benchmarked (measure_rates: the rates its
    step time is predicted with) and then trained once at its own micro-batch; the others recorded as not
    run, with the reason. Planning comes later (plan_runs): it needs no device, and a budget spent on it
    would be taken from the launches."""
    runs = []
    for name, point in points.items():
        run = {"point": name, "steps": point.settings.training.optimizer_steps}
        if name not in launched:
            runs.append({**run, "launch": None, "not_run": "not launched: left out by --launch"})
            continue
        if not budget.allows(f"run {name}", budget.launch_s + MICROBENCH_S):
            runs.append({**run, "launch": None, "not_run": "not launched: out of budget"})
            continue
        rates = measure_rates(point, work)
        print(f"check_runs: micro-benchmarks of {name}: {rates.get('seconds', rates.get('not_run'))}")
        done = launch(point, datasets[name], work / "runs" / name, budget.deadline)
        budget.launch_s = done.seconds
        runs.append({**run, "rates": rates, "launch": done})
        print(f"check_runs: {name}: {done.outcome} in {done.seconds:.0f} s ({len(done.records)} steps)")
    return runs


def plan_runs(runs: list[dict[str, Any]], points: dict[str, Point], work: Path) -> list[dict[str, Any]]:
    """Each run with its point's plan on this machine (the figures plan.json holds); where the run has its
    point's micro-benchmarks (train_points' ``rates``), its step time predicted with them, as
    predict_step_time does (zerogate.predict.planner.with_measured_compute, no measured compute)."""
    machine = from_fingerprint(Fingerprint.read(work / "fingerprint.json"), "gpu-check")
    planned = []
    for run in runs:
        point = points[run["point"]]
        plan = plan_point(point, machine)
        bench = run.get("rates", {}).get("path")
        if bench is not None:
            measured = rates_from_microbench(Microbench.read(bench), bench)
            run_spec, ds_config = RunSpec.read(point.run_spec), DsConfig.read(point.ds_config)
            plan = with_measured_compute(plan, run_spec, ds_config, machine, None, measured)
        planned.append({**run, "plan": plan})
    return planned


def planned_micro_batches(
    points: dict[str, Point], fingerprint: Fingerprint, extra_bytes: int = 0, card_name: str | None = None
) -> list[dict[str, Any]]:
    """Per consumer card of the claimed box (the small one first; only those whose name holds ``card_name``,
    when given) and per point: the plan's largest micro-batch per rank on this machine with its device capped
    at the card's capacity plus ``extra_bytes`` (its point figure, and the largest whose verdict is "fits"
    and the largest that "may fit")."""
    machine = from_fingerprint(fingerprint, "gpu-check")
    cards = sorted(load_description(CLAIMED_BOX).gpus, key=lambda card: card.memory_total_bytes)
    rows = []
    for card in [card for card in cards if card_name is None or card_name in card.name]:
        planned = card.model_copy(update={"memory_total_bytes": card.memory_total_bytes + extra_bytes})
        for name, point in points.items():
            plan = plan_point(point, capped_machine(machine, planned))
            rows.append(
                {
                    "point": name,
                    "card": card.name,
                    "cap_bytes": card.memory_total_bytes,
                    "planned_capacity(bytes)": planned.memory_total_bytes,
                    "plan": plan.largest_micro_batch_per_rank,
                    "plan_fits": plan.largest_micro_batch_fits_per_rank,
                    "plan_may_fit": plan.largest_micro_batch_may_fit_per_rank,
                }
            )
    return rows


def recorded_searches(folders: list[Path]) -> list[dict[str, Any]]:
    """The micro_batch.json rows of recorded checks, in the order given (a later one goes on from an
    earlier one's probes as well)."""
    return [row for folder in folders for row in json.loads((folder / "micro_batch.json").read_text())]


def outside_of(runs: list[dict[str, Any]], probed: dict[str, Any]) -> int | None:
    """What this call's process holds outside the caching allocator: the trained runs' largest gap
    (check_results.outside_allocator), else the probe's reading after its first collective (process_memory),
    else None (nothing measured it)."""
    rows = [
        row
        for run in runs
        if run["launch"] is not None
        for row in step_rows(run["point"], run["launch"].records, on_cpu=False)
    ]
    found = outside_allocator(rows)
    return found if found is not None else probed.get("after_nccl(bytes)")


def resume_cap(row: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """``row`` with the probes and cap of the last of ``earlier``'s rows for its point and card whose
    allocator cap lies within RESUME_TOLERANCE_BYTES of its own (rows without one capped at the card's
    capacity); unchanged when there is none."""
    same = [
        r
        for r in earlier
        if (r["point"], r["card"]) == (row["point"], row["card"])
        and abs(probe_cap(r) - row["allocator_cap(bytes)"]) <= RESUME_TOLERANCE_BYTES
    ]
    if not same:
        return row
    last = same[-1]
    return {
        **row,
        "allocator_cap(bytes)": probe_cap(last),
        "resumed_probes": [p for r in same for p in r["probes"] if not p.get("earlier")],
    }


def search_points(
    points: dict[str, Point],
    datasets: dict[str, Path],
    work: Path,
    budget: Budget,
    kind: str,
    card: str | None = None,
    outside: int | None = None,
    earlier: list[dict[str, Any]] = (),
) -> list:
    """Per consumer card of the claimed box (the small one first; only those whose name holds ``card``, when
    given) and per point: the plan's largest micro-batch on that card and, on a GPU, the largest that trains
    with the caching allocator capped at the card's capacity less ``outside`` (what this machine's process
    holds outside the allocator, measured in this call, which on the card takes from the same memory), so
    that a probe trains where the card would. Every search first tries the plan's own figure, then each goes
    on to its end while the budget lasts. A search recorded in ``earlier`` (micro_batch.json rows) for the
    same point and card at a cap within RESUME_TOLERANCE_BYTES of this one goes on from its probes, at its
    cap."""
    fingerprint = Fingerprint.read(work / "fingerprint.json")
    rows = [
        {
            **row,
            "outside_allocator(bytes)": outside,
            "allocator_cap(bytes)": row["cap_bytes"] - (outside or 0),
        }
        for row in planned_micro_batches(points, fingerprint, card_name=card)
    ]
    rows = [resume_cap(row, earlier) for row in rows]
    searches = [
        resumed(row["plan"], row["resumed_probes"]) if row.get("resumed_probes") else Search(row["plan"])
        for row in rows
    ]
    if kind == "cpu":
        return [
            {**{k: v for k, v in row.items() if k != "resumed_probes"}, "largest": None}
            | {"status": CPU_NO_SEARCH, "probes": []}
            for row in rows
        ]

    def trying(row: dict[str, Any]) -> Callable[[int], str]:
        def try_batch(micro_batch: int) -> str:
            what = f"search {row['point']} on {row['card']} at micro-batch {micro_batch}"
            if not budget.allows(what):
                return "out of budget"
            profile = with_micro_batch(points[row["point"]].profile, micro_batch, PROBE_STEPS[kind])
            where = work / "search" / f"{row['point']}-{row['cap_bytes']}-mb{micro_batch}"
            point = render_point(row["point"], profile, fingerprint, where)
            cap = row["allocator_cap(bytes)"]
            done = launch(point, datasets[row["point"]], where, budget.deadline, cap_bytes=cap)
            budget.launch_s = done.seconds
            return done.outcome

        return try_batch

    for probes in (1, None):  # the plan's figure for every search first, then each to its end
        for row, search in zip(rows, searches, strict=True):
            search.run(trying(row), probes)
    found = [
        {**{k: v for k, v in row.items() if k != "resumed_probes"}, **search.result()}
        for row, search in zip(rows, searches, strict=True)
    ]
    for row in found:
        where = f"{row['point']} on {row['card']}"
        print(f"check_runs: search {where}: plan {row['plan']}, measured {row['largest']} ({row['status']})")
    return found


def main(argv: list[str] | None = None) -> int:
    """The check; whatever breaks it still leaves check.json in ``--out`` with the traceback, since a device
    call returns only what its command wrote."""
    args = parse_args(argv)
    try:
        return check(args)
    except Exception:
        args.out.mkdir(parents=True, exist_ok=True)
        failure = {"mode": "cpu" if args.cpu else "cuda", "problems": [traceback.format_exc()]}
        (args.out / "check.json").write_text(json.dumps(failure, indent=2) + "\n")
        raise


def argument_problem(args: argparse.Namespace, held_out: list[dict[str, Any]]) -> str | None:
    """What is wrong with the command line, in one line, before anything is built: a card no card of the
    claimed box matches, a point that is not one, a recorded check without its micro_batch.json."""
    cards = [card.name for card in load_description(CLAIMED_BOX).gpus]
    if args.search_card is not None and not any(args.search_card in name for name in cards):
        return f"--search-card: no card of {CLAIMED_BOX} holds {args.search_card!r}"
    unknown = set(args.launch or []) - {*POINTS, *(point["id"] for point in held_out)}
    if unknown:
        return f"--launch: no such point: {', '.join(sorted(unknown))}"
    missing = [str(f / "micro_batch.json") for f in args.resume if not (f / "micro_batch.json").is_file()]
    return f"--resume: no such file: {', '.join(missing)}" if missing else None


def check(args: argparse.Namespace) -> int:
    kind = "cpu" if args.cpu else "cuda"
    if kind == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    phases: dict[str, float] = {}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        phases[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    held_out = [] if kind == "cpu" or args.no_held_out else held_out_points()
    problem = argument_problem(args, held_out)
    if problem is not None:
        print(f"check_runs: {problem}", file=sys.stderr)
        return 2
    ops = build_ops(kind)
    phase("ops")
    fingerprint = Fingerprint.of(probe(measure=False), "the probe")
    fingerprint.write(args.work / "fingerprint.json")
    if (kind == "cuda") == fingerprint.on_cpu:
        print(f"check_runs: this machine's accelerator is not {kind}", file=sys.stderr)
        return 2
    phase("probe")
    outside_probe = process_memory(kind, runs_environment())
    print(f"check_runs: outside the allocator: {json.dumps(outside_probe)}")
    phase("process memory")
    profiles = write_grid(args.work, kind, held_out)
    points = {
        name: render_point(name, path, fingerprint, args.work / "rendered" / name)
        for name, path in profiles.items()
    }
    phase("render")
    datasets = prepare_datasets(points, args.work)
    phase("dataset")
    budget = Budget(args.deadline, FIRST_LAUNCH_S[kind])
    launched = args.launch or list(points)
    runs = train_points(points, datasets, args.work, budget, launched)
    phase("runs")
    grid = {name: points[name] for name in args.search_point or POINTS}
    outside = outside_of(runs, outside_probe)
    searches = (
        []
        if args.no_search
        else search_points(
            grid, datasets, args.work, budget, kind, args.search_card, outside, recorded_searches(args.resume)
        )
    )
    phase("micro-batch search")
    trained = len([run for run in runs if run["launch"] is not None])
    unrun = [run["point"] for run in runs if run["launch"] is None]
    kept = [run for run in runs if run["launch"] is not None or not args.plan_launched]
    runs = plan_runs(kept, points, args.work)
    phase("plans")
    context = {
        "mode": kind,
        "budget_s": args.budget_s,
        "spent_s": round(time.time() - (args.deadline - args.budget_s), 1),
        "phases_s": phases,
        "skipped": budget.skipped,
        "ops": ops,
        "process_memory_outside_allocator": outside_probe,
        "outside_allocator_in_runs(bytes)": outside,
        "microbenchmarks": {run["point"]: run["rates"] for run in runs if "rates" in run},
        "fingerprint": fingerprint,
        "install": json.loads(args.install_record.read_text()) if args.install_record else None,
        "kit": json.loads(args.kit_record.read_text()) if args.kit_record else None,
    }
    problems = write_results(args.out, context, runs, searches)
    for problem in problems:
        print(f"check_runs: problem: {problem}")
    verdict = "PASS" if not problems else f"{len(problems)} problem(s)"
    print(f"check_runs: {verdict}; {trained} of {trained + len(unrun)} points trained", end="")
    print(f" (not run: {', '.join(unrun)})" if unrun else "", end="")
    print(f"; results in {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
