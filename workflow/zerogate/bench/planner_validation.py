"""The planner against setups other people published (`snakemake --cores 1 validate_planner`).

Every row of config/published_setups/setups.yaml is turned into what zerogate would compute for it, by
the functions the pipeline itself uses, and judged by zerogate.analysis.planner_validation: rows a formula
printed (DeepSpeed's estimator tables, the ZeRO paper's figures) against the planner's DeepSpeed and paper
columns (zerogate.bench.printed_rows), and runs someone measured planned as a profile is for a described
machine (zerogate.bench.measured_rows). Nothing here re-computes a planner figure.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any

from zerogate import __version__
from zerogate.analysis.planner_validation import grid_rows, summarise
from zerogate.bench.measured_rows import SETUPS_FILE, check_measured_row
from zerogate.bench.printed_rows import check_estimator_row, check_paper_row
from zerogate.config.published_setups import (
    EstimatorRow,
    MeasuredRow,
    PaperRow,
    PublishedSetups,
    read_setups,
)
from zerogate.contracts.planner_grid import PlannerGridTable
from zerogate.contracts.planner_validation import PlannerValidation
from zerogate.contracts.records import GitState
from zerogate.errors import InputError
from zerogate.model.hf_config import load_config
from zerogate.provenance import git_state

PACKAGES = ("deepspeed", "torch", "transformers")


def row_name(index: int, row: Any) -> str:
    return f"setups[{index}] ({row.id})"


def load_table(repo: Path, file: str = SETUPS_FILE) -> tuple[PublishedSetups, dict[str, Any]]:
    """The table and each measured row's model config (transformers' config, read offline). A malformed
    row or a config that does not load stops here, with one line naming the table, the row and the key."""
    table = read_setups(repo / file, file)
    configs = {}
    for index, row in enumerate(table.setups):
        if isinstance(row, MeasuredRow):
            try:
                configs[row.id] = load_config(repo / row.model.config)
            except InputError as error:
                raise InputError(file, f"{row_name(index, row)}: model.config", str(error)) from None
    return table, configs


def validate(repo: Path, file: str = SETUPS_FILE, grid: str | None = None) -> PlannerValidation:
    """Every row of the table judged (the table checked whole first: a bad row plans nothing), and this
    machine's CPU grid as bench_planner_grid judged it where ``grid`` (its JSON) is given."""
    table, configs = load_table(repo, file)
    rows = []
    for row in table.setups:
        if isinstance(row, EstimatorRow):
            rows.append(check_estimator_row(row))
        elif isinstance(row, PaperRow):
            rows.append(check_paper_row(row))
        else:
            rows.append(check_measured_row(row, configs[row.id], repo))
    if grid is not None:
        rows.extend(grid_rows(PlannerGridTable.read(repo / grid), grid))
    return PlannerValidation(
        table=file,
        table_sha256=hashlib.sha256((repo / file).read_bytes()).hexdigest(),
        pipeline_version=__version__,
        git=GitState(**git_state(repo)),
        packages={name: metadata.version(name) for name in PACKAGES},
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        grid=grid,
        rows=rows,
        summary=summarise(rows),
    )
