"""The GPU check's result files (tests/gpu/check_runs.py), seven, in the folder given:

- ``check.json``: the mode, budget and what was skipped, the kit's record and install, the ops build, what a
  CUDA process holds outside the caching allocator (tests/gpu/process_memory.py), the machine's fingerprint,
  each run's outcome, and the problems found (none: the check passed);
- ``steps.jsonl``: each run's steps, one line each: the tensor peak (``torch.cuda.max_memory_allocated``),
  the allocator's (``max_memory_reserved``), the device's (NVML), the step time, the loss and loss scale;
  a reading the machine cannot take is null, its reason under ``absent`` (tests/gpu/check_files.py StepRow);
- ``levels.json``: per run and level (tensor, allocator, device) the plan's figure, the largest measured
  over the run's steps and the error (zerogate.analysis.ledger_check.error_percent);
- ``micro_batch.json``: per consumer card and point, the plan's largest micro-batch and the one measured
  (tests/gpu/check_files.py MicroBatchRow);
- ``plans.json``: each point's plan on this machine, as plan.json holds it;
- ``tables.md``: the levels and micro-batch tables, for docs/measurements.md;
- ``runs.log``: each launch's log (its tail).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tests.gpu.check_files import MicroBatchRow, StepRow, write_micro_batches, write_steps
from zerogate.analysis.ledger_check import error_percent
from zerogate.analysis.measures import step_time
from zerogate.analysis.parse import steps_table
from zerogate.contracts.records import StepRecord

GIB = 1024**3
# Each level the planner predicts on a GPU (zerogate.predict.levels.PEAK_LEVELS["cuda"]), the plan's field
# of the run's scheme that holds it, and the step record's reading that measures it.
LEVELS = (
    ("tensor", "device_tensor_peak_per_rank_bytes", "tensor_peak(bytes)"),
    ("allocator", "device_allocator_peak_per_rank_bytes", "allocator_peak(bytes)"),
    ("device", "device_per_rank_bytes", "device_peak_nvml(bytes)"),
)
# The steps left out of the measured step time before the fp16-skipped ones (zerogate.analysis.measures
# .timed_steps): the first, which loads kernels and builds the optimizer's states. Assumed: one step; the
# recorded H200 runs' first step took 2-5 times the median of the others.
WARMUP_STEPS = 1
CPU_ABSENT = "CPU mode: DeepSpeed's CPU accelerator has no CUDA allocator or NVML"
LOG_TAIL_CHARS = 100_000


def _bytes(gib: float | None) -> int | None:
    return None if gib is None else int(gib * GIB)


def step_rows(point: str, records: list[StepRecord], on_cpu: bool) -> list[StepRow]:
    """The run's steps as steps.jsonl lines, what was not measured null with its reason."""
    rows = []
    for record in records:
        row = {
            "point": point,
            "step": record.step,
            "tensor_peak(bytes)": _bytes(record.max_allocated_gib),
            "allocator_peak(bytes)": _bytes(record.max_reserved_gib),
            "device_peak_nvml(bytes)": _bytes(record.nvml_process_peak_gib),
            "resident_peak(bytes)": _bytes(record.peak_rss_gib),
            "step_time(s)": record.step_time_s,
            "loss": record.loss,
            "loss_scale": record.loss_scale,
            "skip_reason": record.skip_reason,
        }
        absent = {key: CPU_ABSENT for key in [level[2] for level in LEVELS] if on_cpu and row[key] is None}
        if record.loss_scale is None:
            absent["loss_scale"] = "no loss scaler: the run trains in fp32 or bf16"
        rows.append(StepRow.of({**row, "absent": absent}, f"{point} step {record.step}"))
    return rows


def outside_allocator(rows: list[StepRow]) -> int | None:
    """What a run's process held on its device outside the caching allocator: the largest, over steps.jsonl
    rows, of the device reading (NVML) less the allocator's reserve (StepRow.outside_allocator_bytes); None
    when no row has both."""
    gaps = [gap for gap in (row.outside_allocator_bytes() for row in rows) if gap is not None]
    return max(gaps) if gaps else None


def run_levels(point: str, plan: Any, rows: list[StepRow], unmeasured: str) -> list[dict[str, Any]]:
    """Per level: the plan's figure for the run's scheme against the largest reading over the run's steps
    (none: ``unmeasured`` says why)."""
    zerogate = plan.ledger.schemes[plan.scheme].zerogate
    found = []
    for level, predicted_field, reading in LEVELS:
        predicted = getattr(zerogate, predicted_field)
        interval = zerogate.device_per_rank_range_bytes if level == "device" else None
        readings = [value for value in (row.reading(reading) for row in rows) if value is not None]
        measured = max(readings) if readings else None
        found.append(
            {
                "point": point,
                "scheme": plan.scheme,
                "level": level,
                "predicted(bytes)": predicted,
                "predicted_range(bytes)": interval,
                "measured(bytes)": measured,
                "error(%)": None if measured is None else error_percent(predicted, measured),
                "inside": None if None in (interval, measured) else interval[0] <= measured <= interval[1],
                "absent": None if measured is not None else unmeasured,
            }
        )
    return found


def run_problems(point: str, launch: Any, rows: list[StepRow], steps: int, on_cpu: bool) -> list[str]:
    """What is wrong with a run that was started: it did not train, missed steps, or recorded nonsense."""
    if launch.outcome != "trained":
        return [f"{point}: {launch.outcome} (see runs.log)"]
    problems = []
    if [row.step for row in rows] != list(range(1, steps + 1)):
        problems.append(f"{point}: steps {[row.step for row in rows]}, expected 1..{steps}")
    for row in rows:
        where = f"{point} step {row.step}"
        if not math.isfinite(row.loss) or not row.step_time_s > 0:
            problems.append(f"{where}: loss {row.loss}, step time {row.step_time_s}")
        if on_cpu:
            continue
        tensor, allocator, device = (row.reading(level[2]) for level in LEVELS)
        if tensor is None or allocator is None or device is None:
            problems.append(f"{where}: a CUDA reading is missing ({row.absent or 'tensor/allocator/NVML'})")
        elif not 0 < tensor <= allocator:
            problems.append(f"{where}: want 0 < tensor peak {tensor} <= allocator peak {allocator}")
        if row.loss_scale is None:
            problems.append(f"{where}: fp16 without a loss scale")
    return problems


def _or_dash(value: Any) -> str:
    return "—" if value is None else str(value)


def step_time_row(point: str, plan: Any, records: list[StepRecord]) -> dict[str, Any]:
    """The plan's predicted optimizer step (its interval, the deciding term, what has no figure) against the
    run's measured median (zerogate.analysis.measures.step_time, after WARMUP_STEPS and without the steps fp16
    skipped): inside or not, and the interval middle's error."""
    predicted = plan.step_time
    low, high = (None, None) if predicted is None else (predicted.low_s, predicted.high_s)
    timed = steps_table(records) if records else None
    measured = None
    if timed is not None and (timed["step"] > WARMUP_STEPS).any():
        value = step_time(timed, WARMUP_STEPS).value
        measured = None if math.isnan(value) else value
    both = None not in (low, high, measured)
    return {
        "point": point,
        "predicted_low(s)": low,
        "predicted_high(s)": high,
        "deciding_term": None if predicted is None else predicted.deciding_term,
        "missing": [] if predicted is None else predicted.missing,
        "measured_median(s)": measured,
        "inside": (low <= measured <= high) if both else None,
        "middle_error(%)": error_percent((low + high) / 2, measured) if both else None,
    }


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:,.0f} MiB"


def tables(levels: list[dict[str, Any]], searches: list[MicroBatchRow], mode: str) -> str:
    lines = [f"Planner against the GPU check ({mode} mode): each level predicted and measured", ""]
    lines += [
        "| point | scheme | level | predicted | interval | measured | error % | inside |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in levels:
        error = "—" if row["error(%)"] is None else f"{row['error(%)']:+.1f}"
        interval = row["predicted_range(bytes)"]
        shown = "—" if interval is None else f"{_mib(interval[0])} – {_mib(interval[1])}"
        inside = {None: "—", True: "yes", False: "no"}[row["inside"]]
        lines.append(
            f"| {row['point']} | {row['scheme']} | {row['level']} | {_mib(row['predicted(bytes)'])} | "
            f"{shown} | {_mib(row['measured(bytes)'])} | {error} | {inside} |"
        )
    lines += ["", "Largest micro-batch on a consumer card's capacity", ""]
    lines += [
        "The plan is for a card of the capacity planned: the probes' allocator cap plus what the process held"
        " outside the allocator in that call.",
        "",
        "| point | card | capacity | allocator cap | outside | capacity planned | plan | fits up to "
        "| may fit up to | measured | status |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in searches:
        cap, outside = row.allocator_cap_bytes, row.outside_allocator_bytes
        planned = row.planned_capacity_bytes
        lines.append(
            f"| {row.point} | {row.card} | {row.cap_bytes / 1e9:.2f} GB | "
            f"{'—' if cap is None else f'{cap / 1e9:.2f} GB'} | {_mib(outside)} | "
            f"{'—' if planned is None else f'{planned / 1e9:.2f} GB'} | {row.plan} | "
            f"{_or_dash(row.plan_fits)} | {_or_dash(row.plan_may_fit)} | "
            f"{_or_dash(row.largest)} | {row.status} |"
        )
    return "\n".join(lines) + "\n"


def step_time_table(rows: list[dict[str, Any]]) -> str:
    lines = ["", "Optimizer step: predicted (this call's micro-benchmarks) against measured", ""]
    lines += [
        "| point | predicted (s) | deciding term | without a figure | measured median (s) | inside "
        "| middle's error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        low, high, measured = row["predicted_low(s)"], row["predicted_high(s)"], row["measured_median(s)"]
        interval = "—" if None in (low, high) else f"{low:.3g} – {high:.3g}"
        error = "—" if row["middle_error(%)"] is None else f"{row['middle_error(%)']:+.1f} %"
        inside = {None: "—", True: "yes", False: "no"}[row["inside"]]
        lines.append(
            f"| {row['point']} | {interval} | {row['deciding_term'] or '—'} | {len(row['missing'])} | "
            f"{'—' if measured is None else f'{measured:.3g}'} | {inside} | {error} |"
        )
    return "\n".join(lines) + "\n"


def write_results(
    out: Path, context: dict[str, Any], runs: list[dict], searches: list[MicroBatchRow]
) -> list[str]:
    """The seven files (module docstring); the problems found, also in check.json."""
    on_cpu = context["mode"] == "cpu"
    problems = []
    install = context.get("install")
    if install and install["returncode"] != 0:
        problems.append(f"the kit did not install: {install['output_tail'][-300:]}")
    if context["ops"].get("error"):
        problems.append(f"DeepSpeed's ops did not build: {context['ops']['error']}")
    steps, levels, logs, outcomes, times = [], [], [], {}, []
    for run in runs:
        point, launch = run["point"], run["launch"]
        if launch is None:
            outcomes[point] = {"outcome": run["not_run"]}
            levels += run_levels(point, run["plan"], [], run["not_run"])
            continue
        rows = step_rows(point, launch.records, on_cpu)
        steps += rows
        levels += run_levels(point, run["plan"], rows, CPU_ABSENT if on_cpu else "no step recorded it")
        times.append(step_time_row(point, run["plan"], launch.records))
        problems += run_problems(point, launch, rows, run["steps"], on_cpu)
        outcomes[point] = {"outcome": launch.outcome, "seconds": round(launch.seconds, 1), "steps": len(rows)}
        logs.append(f"===== {point}: {launch.outcome} =====\n{launch.log[-LOG_TAIL_CHARS:]}")
    out.mkdir(parents=True, exist_ok=True)
    check = {
        **{k: v for k, v in context.items() if k != "fingerprint"},
        "fingerprint": context["fingerprint"].as_json(),
        "runs": outcomes,
        "step_times": times,
        "problems": problems,
    }
    (out / "check.json").write_text(json.dumps(check, indent=2) + "\n")
    write_steps(out, steps)
    (out / "levels.json").write_text(json.dumps(levels, indent=2) + "\n")
    write_micro_batches(out, searches)
    plans = {run["point"]: run["plan"].as_json() for run in runs}
    (out / "plans.json").write_text(json.dumps(plans) + "\n")
    (out / "tables.md").write_text(tables(levels, searches, context["mode"]) + step_time_table(times))
    (out / "runs.log").write_text("\n".join(logs))
    return problems
