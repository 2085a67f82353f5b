"""Recorded GPU checks re-judged by the planner as it stands: the check's points rendered and planned again
for the machine the check recorded (check.json's fingerprint), and each level against the steps it recorded
(steps.jsonl), through the check's own functions (check_runs.write_grid, render_point, plan_point;
check_results.run_levels and tables). After a planner change, what the same runs say of it: an in-sample
figure, not a new check.

    python -m tests.gpu.replan tests/data/gpu_check/h200-2026-12-04/call{1,2}
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.gpu.check_results import run_levels, tables
from tests.gpu.check_runs import plan_point, render_point, write_grid
from zerogate.config.machines import from_fingerprint
from zerogate.contracts.machine import Fingerprint


def recorded(folders: list[Path]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The first folder's fingerprint (check.json) and every folder's step rows by point (steps.jsonl)."""
    checks = [json.loads((folder / "check.json").read_text()) for folder in folders]
    for folder, check in zip(folders, checks, strict=True):
        if check.get("mode") != "cuda":
            raise SystemExit(f"{folder / 'check.json'}: mode: want cuda, got {check.get('mode')!r}")
    rows: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        for line in (folder / "steps.jsonl").read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["point"], []).append(row)
    return checks[0]["fingerprint"], rows


def replan(folders: list[Path]) -> list[dict[str, Any]]:
    """The levels (check_results.run_levels) of every point, planned now, against the recorded steps."""
    fingerprint_json, rows = recorded(folders)
    with tempfile.TemporaryDirectory(prefix="zerogate-replan-") as work:
        (Path(work) / "fingerprint.json").write_text(json.dumps(fingerprint_json))
        fingerprint = Fingerprint.read(Path(work) / "fingerprint.json")
        machine = from_fingerprint(fingerprint, "gpu-check")
        levels = []
        for name, profile in write_grid(Path(work), "cuda").items():
            plan = plan_point(render_point(name, profile, fingerprint, Path(work) / name), machine)
            levels += run_levels(name, plan, rows.get(name, []), "no step recorded it")
    return levels


if __name__ == "__main__":
    print(tables(replan([Path(folder) for folder in sys.argv[1:]]), [], "cuda"), end="")
