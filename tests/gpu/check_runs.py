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
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tests.gpu.check_launch import Budget, build_ops, launch, process_memory, runs_environment
from tests.gpu.check_points import (
    CLAIMED_BOX,
    POINTS,
    REPO,
    Point,
    held_out_points,
    plan_point,
    prepare_datasets,
    render_point,
    write_grid,
)
from tests.gpu.check_results import write_results
from tests.gpu.check_search import outside_of, recorded_searches, search_points
from zerogate.config.machines import from_fingerprint, load_description
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.planner import with_measured_compute
from zerogate.runtime.probe import probe

MICROBENCH_S = 40.0  # what one point's micro-benchmarks are expected to take (imports and the op included)
FIRST_LAUNCH_S = {"cuda": 60.0, "cpu": 20.0}  # what a launch is expected to take before one was timed


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
