"""Ledger against measurement (``ledger/ledger_vs_measured.json``, zerogate.analysis.ledger_check): each
rank's predicted bytes per term against what it held, and each level of its predicted peak against the
measured one (``levels``: the tensor peak and the resident set on the CPU accelerator; the tensor, allocator
and device peaks on GPUs)."""

from __future__ import annotations

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.plan import PeakPrediction


class LedgerRow(Record):
    rank: int
    term: str
    predicted_bytes: int = Field(alias="predicted(bytes)")
    measured_bytes: int = Field(alias="measured(bytes)")
    error_percent: float | None = Field(alias="error(%)")  # (predicted - measured) / measured
    measured_by: str


class PeakPart(Record):
    predicted_bytes: int = Field(alias="predicted(bytes)")
    measured_bytes: int = Field(alias="measured(bytes)")
    terms: list[str]
    miss_bytes: int = Field(alias="miss(bytes)")
    allocator_free_bytes: int | None = Field(None, alias="allocator_free(bytes)")


class FirstWindow(Record):
    step: int
    peak_bytes: int = Field(alias="peak(bytes)")
    resident_at_end_bytes: int = Field(alias="resident_at_end(bytes)")


class PeakDiagnosis(Record):
    """Which part of the predicted peak is off, from the per-window record (persistent or transient)."""

    window_step: int
    first_window: FirstWindow
    parts: dict[str, PeakPart]
    off: str
    note: str


class PeakRow(LedgerRow):
    within_tolerance: bool
    diagnosis: PeakDiagnosis | None
    with_allocator_free_bytes: int | None = Field(alias="with_allocator_free(bytes)")
    with_allocator_free_error_percent: float | None = Field(alias="with_allocator_free_error(%)")
    off: str | None


class LevelRow(LedgerRow):
    """One rank's predicted peak at one level (zerogate.predict.levels.peak_levels) against its
    measurement."""

    level: str  # tensor | allocator | device | resident_set, or "tensor without the gradient buckets"
    what: str


class PeakTable(Record):
    prediction: PeakPrediction
    rows: list[PeakRow]
    tolerance_percent: float = Field(alias="tolerance(%)")
    max_abs_error_percent: float | None = Field(alias="max_abs_error(%)")
    within_tolerance: bool


class LedgerTable(Artefact):
    CONTRACT = "ledger_table"

    scheme: str
    ranks: int
    dtype: str
    parameters: int
    rows: list[LedgerRow]
    max_abs_model_state_error_percent: float | None = Field(alias="max_abs_model_state_error(%)")
    within_5_percent: bool | None
    peak: PeakTable
    levels: list[LevelRow]
    # Per level, the largest |error| over the ranks (None where nothing was measured).
    level_max_abs_error_percent: dict[str, float | None] = Field(alias="level_max_abs_error(%)")

    def held_totals(self) -> dict[int, int]:
        """Each rank's held model-state bytes (the ``model_states_total`` rows)."""
        return {r.rank: r.measured_bytes for r in self.rows if r.term == "model_states_total"}
