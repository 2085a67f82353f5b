"""The planner's validation grid (``bench/planner_grid.json``, the bench_planner_grid rule): for every grid
point (config/planner_grid.yaml) and every level of its ledger table's ``levels`` rows
(ledger/ledger_vs_measured.json, zerogate.analysis.ledger_check.level_rows: the CPU live-tensor peak, the
same without the gradient buckets, the resident set), the predicted and the measured peak of the rank with
the largest error, that error as the ledger table gives it, and whether it meets the level's target. Written
by zerogate.bench.planner_grid, which also prints it."""

from __future__ import annotations

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.records import GitState


class GridLevel(Record):
    """One level of one point: the worst rank's row of the point's ledger table, judged against the target."""

    point: str
    architecture: str
    parameters: int
    scheme: str  # the ledger table's (zerogate.predict.setup.setup_from_config)
    stage: int
    offload: str  # none | optimizer | optimizer+parameters
    micro_batch: int
    seq_len: int
    activation_checkpointing: bool
    attention: str
    level: str  # a LevelRow.level of the ledger table
    rank: int  # the rank with the largest |error| at this level
    predicted_bytes: int = Field(alias="predicted(bytes)")
    measured_bytes: int = Field(alias="measured(bytes)")
    error_percent: float | None = Field(alias="error(%)")  # the ledger table's, unchanged
    target_percent: float = Field(alias="target(%)")  # |error| at or below it meets the target
    within_target: bool | None  # None: nothing measured
    # The resident set only: the ledger table's peak row of the same rank, the prediction with the freed
    # memory
    # the C allocator kept, measured, in place of the predicted retained heap, its error; None on the other
    # levels or where not recorded.
    with_allocator_free_error_percent: float | None = Field(alias="with_allocator_free_error(%)")
    train_seconds: float | None = Field(alias="train(s)")  # the point's train rule, Snakemake's benchmark


class PlannerGridTable(Artefact):
    CONTRACT = "planner_grid"

    grid: str  # the grid file, as the rule read it
    grid_sha256: str
    pipeline_version: str
    git: GitState
    packages: dict[str, str]
    recorded_at: str
    targets_percent: dict[str, float] = Field(alias="targets(%)")  # per level
    rows: list[GridLevel]
    missed: list[str]  # "<point>: <level>" of every row beyond its target, or with nothing measured
