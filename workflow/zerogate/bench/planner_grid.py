"""The planner's validation grid as a table (`make bench-planner-grid`, rule bench_planner_grid).

Every point of config/planner_grid.yaml (zerogate.bench.grid_points) trained a few optimizer steps through
the pipeline's own rules under its own profile, and compare_ledger wrote its ledger table
(ledger/ledger_vs_measured.json). This module reads nothing else of the run's measurements: each row is one
of the table's ``levels`` rows (zerogate.analysis.ledger_check.level_rows: the CPU live-tensor peak of the
sampled step, the same without the gradient buckets, the resident set), the rank with the largest |error|,
with the ledger table's own error; the point's settings come from its run spec and rendered DeepSpeed
config. Targets per level: the live-tensor peak within :data:`LIVE_TENSOR_TARGET` percent (with and without
the buckets), the resident set within the ledger table's peak tolerance
(zerogate.analysis.ledger_check.PEAK_TOLERANCE). Beside the resident set, the ledger table's own figure for
it with the freed memory the C allocator kept at the peak's step, measured, in place of the retained heap it
predicts (its peak rows' ``with_allocator_free_error(%)``): a column of evidence, not the judged error.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import hashlib
from importlib import metadata
from pathlib import Path

from zerogate import __version__
from zerogate.analysis.ledger_check import BUCKETS_EXCLUDED, PEAK_RSS, PEAK_TOLERANCE
from zerogate.contracts.ledger import LedgerTable, LevelRow
from zerogate.contracts.planner_grid import GridLevel, PlannerGridTable
from zerogate.contracts.records import GitState
from zerogate.contracts.run import DsConfig, RunSpec

# The live-tensor peak's target, in percent of the measured peak.
LIVE_TENSOR_TARGET = 10.0
TARGETS = {"tensor": LIVE_TENSOR_TARGET, BUCKETS_EXCLUDED: LIVE_TENSOR_TARGET, "resident_set": PEAK_TOLERANCE}
PACKAGES = ("deepspeed", "torch", "transformers")


@dataclasses.dataclass(frozen=True)
class PointRun:
    """What the pipeline wrote for one point: its ledger table, run spec, rendered DeepSpeed config, and the
    train rule's wall time (Snakemake's benchmark file; None where there is none)."""

    point: str
    ledger: LedgerTable
    run_spec: RunSpec
    ds_config: DsConfig
    train_seconds: float | None


def train_seconds(benchmark_tsv: str | Path) -> float | None:
    """The ``s`` column of a Snakemake benchmark file (one run)."""
    path = Path(benchmark_tsv)
    if not path.is_file():
        return None
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return float(rows[0]["s"]) if rows else None


def read_point(
    point: str, ledger: str | Path, run_spec: str | Path, ds_config: str | Path, benchmark: str | Path
) -> PointRun:
    return PointRun(
        point,
        LedgerTable.read(ledger),
        RunSpec.read(run_spec),
        DsConfig.read(ds_config),
        train_seconds(benchmark),
    )


def offload_of(ds_config: DsConfig) -> str:
    zero = ds_config.zero_optimization
    optimizer = zero.offload_optimizer is not None and zero.offload_optimizer.on
    parameters = zero.offload_param is not None and zero.offload_param.on and zero.stage == 3
    return (
        "optimizer+parameters"
        if optimizer and parameters
        else "optimizer"
        if optimizer
        else "parameters"
        if parameters
        else "none"
    )


def _worst(rows: list[LevelRow]) -> LevelRow:
    """The rank's row with the largest |error| (a row with nothing measured first: it cannot be judged)."""
    return max(rows, key=lambda r: float("inf") if r.error_percent is None else abs(r.error_percent))


def point_levels(run: PointRun) -> list[GridLevel]:
    """The point's rows: one per level of its ledger table that has a target, in the table's order."""
    spec, table = run.run_spec, run.ledger
    by_level: dict[str, list[LevelRow]] = {}
    for row in table.levels:
        if row.level in TARGETS:
            by_level.setdefault(row.level, []).append(row)
    # The resident set is the CPU run's own peak metric: its peak rows hold the same figures and, beside them,
    # the prediction plus the allocator's freed memory.
    with_free = (
        {r.rank: r.with_allocator_free_error_percent for r in table.peak.rows}
        if table.peak.prediction.metric == PEAK_RSS
        else {}
    )
    rows = []
    for level, level_rows in by_level.items():
        worst = _worst(level_rows)
        target = TARGETS[level]
        rows.append(
            GridLevel.of(
                {
                    "point": run.point,
                    "architecture": spec.model.architecture or "?",
                    "parameters": table.parameters,
                    "scheme": table.scheme,
                    "stage": run.ds_config.stage,
                    "offload": offload_of(run.ds_config),
                    "micro_batch": spec.training.micro_batch_per_rank,
                    "seq_len": spec.seq_len,
                    "activation_checkpointing": spec.training.activation_checkpointing,
                    "attention": spec.model.attention,
                    "level": level,
                    "rank": worst.rank,
                    "predicted(bytes)": worst.predicted_bytes,
                    "measured(bytes)": worst.measured_bytes,
                    "error(%)": worst.error_percent,
                    "target(%)": target,
                    "within_target": None
                    if worst.error_percent is None
                    else abs(worst.error_percent) <= target,
                    "with_allocator_free_error(%)": with_free.get(worst.rank)
                    if level == "resident_set"
                    else None,
                    "train(s)": run.train_seconds,
                },
                f"point {run.point}",
            )
        )
    return rows


def grid_table(runs: list[PointRun], grid_file: str, grid_bytes: bytes, git: GitState) -> PlannerGridTable:
    rows = [row for run in runs for row in point_levels(run)]
    missing = [
        f"{run.point}: no level measured" for run in runs if not any(r.point == run.point for r in rows)
    ]
    return PlannerGridTable.of(
        {
            "grid": grid_file,
            "grid_sha256": hashlib.sha256(grid_bytes).hexdigest(),
            "pipeline_version": __version__,
            "git": git,
            "packages": {name: metadata.version(name) for name in PACKAGES},
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "targets(%)": TARGETS,
            "rows": rows,
            "missed": [f"{r.point}: {r.level}" for r in rows if r.within_target is not True] + missing,
        },
        "the planner grid table",
    )


COLUMNS = (
    "point",
    "arch",
    "params",
    "stage",
    "offload",
    "micro-batch",
    "seq",
    "ckpt",
    "attention",
    "level",
    "predicted",
    "measured",
    "error %",
    "within target",
    "error % with allocator free",
    "train (s)",
)
LEVEL_NAMES = {
    "tensor": "live tensors",
    BUCKETS_EXCLUDED: "live tensors less buckets",
    "resident_set": "resident set",
}


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def cells(row: GridLevel) -> list[str]:
    error = "n/a" if row.error_percent is None else f"{row.error_percent:+.2f}"
    within = {True: "yes", False: "NO", None: "n/a"}[row.within_target]
    return [
        row.point,
        row.architecture,
        f"{row.parameters / 1e6:.1f} M",
        str(row.stage),
        row.offload,
        str(row.micro_batch),
        str(row.seq_len),
        "on" if row.activation_checkpointing else "off",
        row.attention,
        LEVEL_NAMES.get(row.level, row.level),
        _mib(row.predicted_bytes),
        _mib(row.measured_bytes),
        error,
        f"{within} (±{row.target_percent:g} %)",
        ""
        if row.with_allocator_free_error_percent is None
        else f"{row.with_allocator_free_error_percent:+.2f}",
        "—" if row.train_seconds is None else f"{row.train_seconds:.0f}",
    ]


def _summary(table: PlannerGridTable) -> str:
    points = len(dict.fromkeys(r.point for r in table.rows))
    met = sum(r.within_target is True for r in table.rows)
    return f"{points} points, {len(table.rows)} rows: {met} within target, {len(table.missed)} missed" + (
        f" ({'; '.join(table.missed)})" if table.missed else ""
    )


def text(table: PlannerGridTable) -> str:
    """The table as aligned text (printed by the rule and written beside the JSON)."""
    body = [list(COLUMNS)] + [cells(r) for r in table.rows]
    widths = [max(len(line[i]) for line in body) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in body]
    lines.insert(1, "  ".join("-" * width for width in widths))
    head = (
        f"planner grid ({table.grid}): predicted vs measured per point and level, the worst rank "
        f"(ledger/ledger_vs_measured.json of each point; error = (predicted - measured) / measured)"
    )
    return "\n".join([head, *lines, _summary(table)])


def markdown(table: PlannerGridTable) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in table.rows]
    return "\n".join(lines + ["", _summary(table)]) + "\n"
