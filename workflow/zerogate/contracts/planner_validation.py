"""The validate_planner rule's ``results/planner_validation/planner_validation.json``: every published
figure of config/published_setups/setups.yaml beside what zerogate predicts for it, each judged against
its target with the gates' vocabulary (PASS: target met, FAIL: missed, NOT MEASURED: nothing to judge,
with the reason), and the counts per target. Written by zerogate.bench.planner_validation, printed by
zerogate.analysis.planner_validation.table_text; the tests read it through this class.
"""

from __future__ import annotations

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.records import GitState
from zerogate.contracts.verdicts import GateOutcome


class FigureCheck(Record):
    """One published figure against zerogate's: both in words and as numbers (bytes or a micro-batch
    count; None for a verdict), the error, the target and the verdict. ``verdict`` is None for a figure
    printed without a target (a memory reading); ``basis`` says how it was judged or why it was not."""

    quantity: str
    published: str
    predicted: str
    published_value: float | None
    predicted_value: float | None
    error_percent: float | None = Field(alias="error(%)")
    target: str | None
    verdict: GateOutcome | None
    basis: str


class RowCheck(Record):
    """One row of the table: where it was published, its figures judged, and what the row states that
    the planner could not be told (a setting its settings have no key for). ``group``: independent
    (published runs), this machine (CPU grid) or consistency (estimator and paper formulas), as
    zerogate.analysis.planner_validation.GROUPS names them; ``held_out``: a row judged first by the planner
    as it stood when the row was added."""

    id: str
    kind: str  # estimator_table | paper_figure | measured | cpu_grid
    group: str
    held_out: bool = False
    source: str  # the address
    where: str  # the place in it
    checks: list[FigureCheck]
    not_expressed: list[str]


class TargetSummary(Record):
    """How many figures met, missed and could not be judged against one target, in its group."""

    group: str
    target: str
    passed: int
    failed: int
    not_measured: int


class PlannerValidation(Artefact):
    """The planner against the published setups (see the module docstring)."""

    CONTRACT = "planner_validation"

    table: str  # the setups file, as the rule read it
    table_sha256: str
    pipeline_version: str
    git: GitState
    packages: dict[str, str]  # deepspeed, torch, transformers: the versions the figures come from
    recorded_at: str
    grid: str | None  # this machine's CPU grid as read (bench_planner_grid's JSON); None: not run here
    rows: list[RowCheck]
    summary: list[TargetSummary]
