"""Judging: one vocabulary for every verdict zerogate gives, the gates' verdicts with their evidence
(``gates/verdicts.json``), the claims judged on paper and measured (``claims/verdicts.json``,
``plan/claims.json``).

Two kinds of verdict, each from one fixed vocabulary, defined here and nowhere else:
- a **gate** is a measurement against a threshold: ``PASS``, ``FAIL``, ``INCONCLUSIVE`` or ``NOT
  MEASURED`` (never PASS for a metric that was not measured). A time gate judges its value's interval
  (zerogate.analysis.intervals): PASS when the whole interval meets the threshold, FAIL when
  none of it does, INCONCLUSIVE when it straddles the threshold (the run cannot tell which side it is on);
- a **claim** is a statement judged on the evidence, on paper (a plan) or measured (the gates, the
  tables): ``holds``, ``holds only when <condition>``, ``does not hold`` or ``cannot be judged here
  (<why>)``. The plan's text, the claims register and the report all print a claim's verdict with
  :meth:`ClaimVerdict.text`, and a gate's outcome becomes a claim's verdict through one function,
  :func:`claim_from_gate`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, computed_field, model_validator

from zerogate.config.judging import GateSettings
from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.intervals import GateInterval

# --- the vocabulary ------------------------------------------------------------------------------------

PASS, FAIL, INCONCLUSIVE, NOT_MEASURED = "PASS", "FAIL", "INCONCLUSIVE", "NOT MEASURED"
GATE_OUTCOMES = (PASS, FAIL, INCONCLUSIVE, NOT_MEASURED)
GateOutcome = Literal["PASS", "FAIL", "INCONCLUSIVE", "NOT MEASURED"]

HOLDS = "holds"
HOLDS_ONLY_WHEN = "holds only when"
DOES_NOT_HOLD = "does not hold"
CANNOT_JUDGE = "cannot be judged here"
CLAIM_VERDICTS = (HOLDS, HOLDS_ONLY_WHEN, DOES_NOT_HOLD, CANNOT_JUDGE)
ClaimWord = Literal["holds", "holds only when", "does not hold", "cannot be judged here"]


class ClaimVerdict(Record):
    """A claim judged: the verdict, its condition (``holds only when``) or reason (``cannot be judged
    here``), the evidence in words and where it comes from."""

    verdict: ClaimWord
    evidence: str
    source: str
    condition: str | None = None
    why: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        """``text`` is written for a reader of the file and derived again on reading."""
        return {k: v for k, v in data.items() if k != "text"} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _complete(self) -> ClaimVerdict:
        if self.verdict == HOLDS_ONLY_WHEN and not self.condition:
            raise ValueError("'holds only when' needs its condition")
        if self.verdict == CANNOT_JUDGE and not self.why:
            raise ValueError("'cannot be judged here' needs its reason")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def text(self) -> str:
        """The verdict in words, the same wherever it is printed."""
        if self.verdict == HOLDS_ONLY_WHEN:
            return f"holds only when {self.condition}"
        if self.verdict == CANNOT_JUDGE:
            return f"cannot be judged here ({self.why})"
        return self.verdict


def claim_from_gate(
    outcome: str,
    text: str,
    source: str,
    *,
    faithful: bool,
    condition: str | None = None,
    why: str | None = None,
) -> ClaimVerdict:
    """A claim's measured verdict from the gate that tests it: PASS holds (only when ``condition``, for a
    run that is not a faithful reproduction), FAIL does not hold, INCONCLUSIVE cannot be judged here (the
    measurement's interval straddles the claim's number: this run cannot tell whether it holds; more timed
    steps or repeats narrow it), NOT MEASURED cannot be judged."""
    if outcome == PASS:
        return (
            ClaimVerdict(verdict=HOLDS, evidence=text, source=source)
            if faithful
            else ClaimVerdict(
                verdict=HOLDS_ONLY_WHEN,
                evidence=text,
                source=source,
                condition=condition or "this run's setup",
            )
        )
    if outcome == FAIL:
        return ClaimVerdict(verdict=DOES_NOT_HOLD, evidence=text, source=source)
    if outcome == INCONCLUSIVE:
        return ClaimVerdict(
            verdict=CANNOT_JUDGE,
            evidence=text,
            source=source,
            why="the measured interval straddles the claimed threshold: within this run's noise it "
            "may hold or not; more timed steps or repeats narrow the interval",
        )
    return ClaimVerdict(
        verdict=CANNOT_JUDGE, evidence=text, source=source, why=why or "the gate was not measured"
    )


# --- gate evidence, one class per statistic --------------------------------------------------------------


class RecordEvidence(Record):
    """The step records counted (zerogate.analysis.health.record_completeness)."""

    world_size: int | None = Field(alias="world_size(ranks)")
    expected_steps: int | None = Field(alias="expected_steps(steps)")
    ranks_present: list[int] = Field(alias="ranks_present(rank)")
    missing_ranks: list[int] = Field(alias="missing_ranks(rank)")
    extra_ranks: list[int] = Field(alias="extra_ranks(rank)")
    steps_per_rank: dict[int, int] = Field(alias="steps_per_rank(steps)")  # distinct optimizer steps recorded
    missing_steps: dict[int, str] = Field(alias="missing_steps(step)")
    repeated_steps: dict[int, str] = Field(alias="repeated_steps(step)")
    unexpected_steps: dict[int, str] = Field(alias="unexpected_steps(step)")


class FailureEvidence(Record):
    rank: int | None = Field(alias="rank(rank)")
    kind: str
    message: str
    exit_code: int | None = Field(alias="exit_code(code)")
    last_lines: list[str]


class CompletionEvidence(Record):
    finished: bool
    failures: list[FailureEvidence]
    last_step_per_rank: dict[int, int] = Field(alias="last_step_per_rank(step)")
    stopped_early_at: dict[int, int] = Field(alias="stopped_early_at(step)")
    failed_ranks: list[int] = Field(alias="failed_ranks(rank)")
    run_complete: bool


class SlowestRankEvidence(Record):
    """median, p90, max: the statistic of each rank's series, then the worst rank."""

    kind: Literal["slowest_rank"] = "slowest_rank"
    warmup_steps_excluded: int = Field(alias="warmup_steps_excluded(steps)")
    overflow_skipped_steps_excluded: int | None = Field(None, alias="overflow_skipped_steps_excluded(steps)")
    device_selection: str | None = None
    memory_source: list[str] | None = None
    metric_unit: str
    per_rank: dict[int, float]  # in the metric's unit
    worst_rank: int = Field(alias="worst_rank(rank)")
    per_rank_in_gate_unit: dict[int, float] | None = None
    p90: float | None = None  # beside a median step time, in the metric's unit
    # With repeats: each repeat's slowest-rank statistic (the measured value pools them); per_rank and
    # worst_rank are the first repeat's.
    per_repeat: list[float] | None = None


class ConvergenceRuleEvidence(Record):
    initial_steps: int = Field(alias="initial_steps(steps)")
    final_fraction: float = Field(alias="final_fraction(ratio)")
    max_rebound: float = Field(alias="max_rebound(ratio)")
    min_drop_sigmas: float = Field(alias="min_drop(final-block sigmas)")


class ConvergenceEvidence(Record):
    kind: Literal["loss_convergence"] = "loss_convergence"
    steps: int = Field(alias="steps(steps)")
    nonfinite_loss_steps: list[int] = Field(alias="nonfinite_loss_steps(step)")
    initial_loss: float | None = Field(alias="initial_loss(nats/token)")
    final_loss: float | None = Field(alias="final_loss(nats/token)")
    lowest_block_mean_loss: float | None = Field(alias="lowest_block_mean_loss(nats/token)")
    final_block_spread: float | None = Field(alias="final_block_spread(nats/token)")
    rebound: float | None = Field(alias="rebound(ratio)")
    drop_sigmas: float | None = Field(alias="drop(final-block sigmas)")
    rule: ConvergenceRuleEvidence
    spikes: int = Field(alias="spikes(count)")
    spike_steps: list[int] = Field(alias="spike_steps(step)")
    spike_rule: str


class FloorRatioEvidence(Record):
    kind: Literal["floor_ratio"] = "floor_ratio"
    per_rank: dict[int, float] = Field(alias="per_rank(s)")
    worst_rank: int = Field(alias="worst_rank(rank)")
    median_step_time: float = Field(alias="median_step_time(s)")
    floor: float = Field(alias="floor(s)")
    warmup_steps_excluded: int = Field(alias="warmup_steps_excluded(steps)")
    floor_terms: dict[str, float | None] = Field(default_factory=dict, alias="floor_terms(s)")
    per_repeat: list[float] | None = Field(None, alias="median_step_time_per_repeat(s)")


class ProgressLineEvidence(Record):
    at_step: int = Field(alias="at_step(step)")
    skipped: int = Field(alias="skipped(steps)")
    note: str


class OverflowEvidence(Record):
    kind: Literal["overflow_skip_fraction"] = "overflow_skip_fraction"
    source: str
    skip_fraction_per_rank: dict[int, float] = Field(alias="skip_fraction_per_rank(ratio)")
    skipped_per_rank: dict[int, int] = Field(alias="skipped_per_rank(steps)")
    deepspeed_progress_line: ProgressLineEvidence | None = None


class FailedRanksEvidence(CompletionEvidence):
    kind: Literal["failed_ranks"] = "failed_ranks"
    records: RecordEvidence


class NonfiniteEventEvidence(Record):
    step: int = Field(alias="step(step)")
    ranks: list[int] = Field(alias="ranks(rank)")
    metrics: list[str]
    sources: list[str]


class NonfiniteEvidence(CompletionEvidence):
    kind: Literal["nonfinite_count"] = "nonfinite_count"
    faults: int = Field(alias="faults(count)")
    nonfinite_steps: int = Field(alias="nonfinite_steps(count)")
    nonfinite_events: list[NonfiniteEventEvidence]
    fatal_loss_scale_abort: bool
    fatal_loss_scale_ranks: list[int] = Field(alias="fatal_loss_scale_ranks(rank)")
    metrics: list[str]
    records: RecordEvidence


GateEvidence = Annotated[
    SlowestRankEvidence
    | ConvergenceEvidence
    | FloorRatioEvidence
    | OverflowEvidence
    | FailedRanksEvidence
    | NonfiniteEvidence,
    Field(discriminator="kind"),
]


class JudgedGate(Record):
    """One gate judged, without its evidence: its settings as the profile states them, the measured value
    (in ``unit``) and the outcome, with why. What the run registry keeps of each gate."""

    name: str
    claim: str
    definition: str
    metric: str
    statistic: str
    comparison: str
    threshold: float
    unit: str
    measured: float | None
    interval: GateInterval | None = None  # a time gate's interval on ``measured``, in ``unit``
    verdict: GateOutcome
    reason: str


class GateVerdict(JudgedGate):
    """One gate judged, with the evidence behind the measured value (None when NOT MEASURED)."""

    evidence: GateEvidence | None = None

    @classmethod
    def judged(
        cls,
        gate: GateSettings,
        measured: float | None,
        verdict: str,
        reason: str,
        evidence: Any = None,
        interval: GateInterval | None = None,
    ) -> GateVerdict:
        return cls(
            name=gate.name,
            claim=gate.claim,
            definition=gate.definition,
            metric=gate.metric,
            statistic=gate.statistic,
            comparison=gate.comparison,
            threshold=gate.threshold,
            unit=gate.unit,
            measured=measured,
            interval=interval,
            verdict=verdict,
            reason=reason,
            evidence=evidence,
        )


class Reproduction(Record):
    """Whether the run reproduces the claim as published: its config unchanged, and its hardware."""

    faithful: bool
    reasons: list[str]


class GateVerdicts(Artefact):
    CONTRACT = "gate_verdicts"

    gates: list[GateVerdict]
    counts: dict[GateOutcome, int]
    reproduction: Reproduction
    records: RecordEvidence  # the step records counted, whichever gates the profile has

    def gate(self, name: str) -> GateVerdict | None:
        return next((g for g in self.gates if g.name == name), None)

    @property
    def failed(self) -> list[GateVerdict]:
        return [g for g in self.gates if g.verdict == FAIL]

    @property
    def inconclusive(self) -> list[GateVerdict]:
        return [g for g in self.gates if g.verdict == INCONCLUSIVE]


# --- claims ---------------------------------------------------------------------------------------------


class JudgedClaim(Record):
    """One claim judged twice: on paper (a plan) and measured on the machine that ran."""

    id: str
    statement: str
    kind: str
    on_paper: ClaimVerdict
    measured_here: ClaimVerdict


class ClaimedBox(Record):
    profile: str
    machine: str  # its description file
    machine_name: str


class ClaimVerdicts(Artefact):
    """``claims/<claim>/verdicts.json``: a claim's statements (its claim file, config/claims/<claim>.yaml by
    default), each judged on paper for the claimed box and measured here."""

    CONTRACT = "claim_verdicts"

    claim: str  # the claim's name (its file's stem)
    source: str  # where it was published
    claimed_box: ClaimedBox
    machine: str
    vocabulary: list[str] = list(CLAIM_VERDICTS)
    claims: list[JudgedClaim]

    def claim(self, claim_id: str) -> JudgedClaim | None:
        return next((c for c in self.claims if c.id == claim_id), None)


class PlanClaim(Record):
    """One of the profile's gates, or the run's fit, judged on paper against this machine's plan."""

    gate: str
    claim: str
    verdict: ClaimVerdict


class PlanClaims(Artefact):
    """``plan/claims.json``: the profile's memory and step-time gates judged on paper, the run's fit first."""

    CONTRACT = "plan_claims"

    machine: str
    claims: list[PlanClaim]
