"""Recorded GPU checks re-judged by the planner as it stands: the check's points rendered and planned again
for the machine the check recorded (check.json's fingerprint), and each level against the steps it recorded
(steps.jsonl), through the check's own functions (check_points.write_grid, render_point, plan_point;
check_results.run_levels and tables). After a planner change, what the same runs say of it: an in-sample
figure, not a new check.

    python -m tests.gpu.replan tests/data/gpu_check/h200-2026-12-04/call{1,2,3,5,6}
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.gpu.check_files import MicroBatchRow, StepRow, read_micro_batches, read_steps
from tests.gpu.check_points import POINTS, held_out_points, plan_point, render_point, write_grid
from tests.gpu.check_results import outside_allocator, run_levels, tables
from tests.gpu.check_search import planned_micro_batches
from zerogate.config.machines import from_fingerprint
from zerogate.contracts.machine import Fingerprint

NOT_SEARCHED = {"largest": None, "status": "not searched in the recorded checks", "probes": []}


def recorded(folders: list[Path]) -> tuple[dict[str, Any], dict[str, list[StepRow]]]:
    """The first folder's fingerprint (check.json) and every folder's step rows by point (steps.jsonl)."""
    checks = [json.loads((folder / "check.json").read_text()) for folder in folders]
    for folder, check in zip(folders, checks, strict=True):
        if check.get("mode") != "cuda":
            raise SystemExit(f"{folder / 'check.json'}: mode: want cuda, got {check.get('mode')!r}")
    rows: dict[str, list[StepRow]] = {}
    for folder in folders:
        for row in read_steps(folder):
            rows.setdefault(row.point, []).append(row)
    return checks[0]["fingerprint"], rows


def replan(
    folders: list[Path], held_out: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[MicroBatchRow]]:
    """The levels (check_results.run_levels) of every point (the grid's and ``held_out``, by default
    check_points.held_out_points()), planned now,
    against the recorded steps (none: the level's measured figure is empty); and
    the plan's largest micro-batch per card of the claimed box and point (check_search.planned_micro_batches)
    beside what the recorded searches measured."""
    fingerprint_json, rows = recorded(folders)
    # Per point, card and the card the probes measured (extra_bytes), the rows where a probe launched (the
    # others measured nothing), a later call's replacing an earlier one.
    searched: dict[tuple[str, str, int], MicroBatchRow] = {}
    for folder in folders:
        if (folder / "micro_batch.json").exists():
            outside = outside_allocator(read_steps(folder))
            for row in read_micro_batches(folder):
                capped = as_capped(row, outside)
                key = (row.point, row.card, extra_bytes(capped))
                if any(probe.outcome != "out of budget" for probe in row.probes):
                    searched[key] = capped
    with tempfile.TemporaryDirectory(prefix="zerogate-replan-") as work:
        (Path(work) / "fingerprint.json").write_text(json.dumps(fingerprint_json))
        fingerprint = Fingerprint.read(Path(work) / "fingerprint.json")
        machine = from_fingerprint(fingerprint, "gpu-check")
        points = {
            name: render_point(name, profile, fingerprint, Path(work) / name)
            for name, profile in write_grid(
                Path(work), "cuda", held_out_points() if held_out is None else held_out
            ).items()
        }
        levels = []
        for name, point in points.items():
            levels += run_levels(name, plan_point(point, machine), rows.get(name, []), "no step recorded it")
        grid = {name: points[name] for name in POINTS}
        extras = sorted({0} | {extra for _, _, extra in searched})
        planned = {0: {(r["point"], r["card"]): r for r in planned_micro_batches(grid, fingerprint)}}
        for point, card, extra in sorted(key for key in searched if key[2] != 0):  # the cards measured only
            (row,) = planned_micro_batches({point: grid[point]}, fingerprint, extra, card_name=card)
            planned.setdefault(extra, {})[point, card] = row
        micro_batches = []  # per point and card: the card itself, then each other card the probes measured
        for point, card in planned[0]:
            for extra in extras:
                found = searched.get((point, card, extra))
                if found is None and extra != 0:
                    continue
                measured = NOT_SEARCHED if found is None else found.as_json()
                row = {**NOT_SEARCHED, **measured, **planned[extra][point, card]}
                micro_batches.append(MicroBatchRow.of(row, f"the replanned search of {point} on {card}"))
    return levels, micro_batches


def as_capped(row: MicroBatchRow, outside: int | None) -> MicroBatchRow:
    """A recorded search row with its probes' allocator cap and what the process held outside the allocator
    in its call. Rows written before the check capped the allocator at the card's capacity less that
    (check_search.search_points) capped it at the capacity itself: theirs is ``outside`` (the call's runs,
    check_results.outside_allocator)."""
    if row.allocator_cap_bytes is not None:
        return row
    return row.model_copy(update={"allocator_cap_bytes": row.probe_cap, "outside_allocator_bytes": outside})


def extra_bytes(row: MicroBatchRow) -> int:
    """What the plan adds to the card's capacity to plan the card the probes measured: their allocator cap
    plus the process's memory outside the allocator, less the capacity (0 for a row the check capped at the
    capacity less that; 0 for a row not searched)."""
    if row.allocator_cap_bytes is None:
        return 0
    return row.allocator_cap_bytes + (row.outside_allocator_bytes or 0) - row.cap_bytes


if __name__ == "__main__":
    print(tables(*replan([Path(folder) for folder in sys.argv[1:]]), "cuda"), end="")
