"""Judge the run against the profile's gates: each gate a record with its definition, the measured
value, the threshold and a verdict. A metric that was not measured is NOT MEASURED, never PASS.

The run's statistics come from its summary (zerogate.contracts.summary, computed once by the summarise_run
rule): the records counted, the time statistics pooled over the repeats with their bootstrap, the loss
spikes. What a gate's own settings select (its metric, its ranks, its convergence rule) is measured by
zerogate.analysis.gate_measures from the records with the definitions of zerogate.analysis.measures; this
module checks the records first, then compares the value (or its interval) with the threshold. The evidence
is typed per statistic (zerogate.contracts.verdicts): its keys carry their units, e.g. ``floor(s)``,
``skipped_per_rank(steps)``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.gate_measures import Measured, NotMeasured, measure, to_gate_unit
from zerogate.analysis.health import RecordCompleteness
from zerogate.analysis.intervals import TIMING_STATISTICS, TimingReplicates
from zerogate.config.judging import GateSettings
from zerogate.contracts.intervals import GateInterval, Interval
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import Deviations
from zerogate.contracts.summary import RunSummary
from zerogate.contracts.verdicts import (
    FAIL,
    GATE_OUTCOMES,
    INCONCLUSIVE,
    NOT_MEASURED,
    PASS,
    GateVerdict,
    GateVerdicts,
    Reproduction,
)

COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
}


def timed_statistic(gate: GateSettings) -> str | None:
    """The timing statistic (TIMING_STATISTICS) whose interval a time gate judges: a slowest-rank
    median or p90 of a timed metric, or the median step time a floor ratio divides; None for other gates."""
    if gate.statistic == "floor_ratio":
        return "step_time_median_s"
    return next(
        (
            name
            for name, (metric, statistic, over) in TIMING_STATISTICS.items()
            if metric == gate.metric and statistic == gate.statistic and over == "slowest rank"
        ),
        None,
    )


def interval_outcome(comparison: str, threshold: float, interval: Interval) -> str:
    """PASS when every value of the interval meets the threshold, FAIL when none does, INCONCLUSIVE when
    it straddles the threshold. For <, <=, >=, > the values that pass form a half-line, so the ends decide;
    for == only the threshold itself passes, so an interval around it is INCONCLUSIVE."""
    meets = COMPARE[comparison]
    low, high = meets(interval.low, threshold), meets(interval.high, threshold)
    if low and high:
        return PASS
    if not low and not high and not (comparison == "==" and interval.contains(threshold)):
        return FAIL
    return INCONCLUSIVE


# The statistics whose gates judge completeness itself: they FAIL on incomplete records, never NOT MEASURED.
COMPLETENESS_STATISTICS = ("failed_ranks", "nonfinite_count")


def repeat_problems(summary: RunSummary) -> list[str]:
    """Why the other repeats' records (profile key ``repeats``) are incomplete, one entry per repeat."""
    found = []
    for index, counts in enumerate(summary.records[1:], start=1):
        records = RecordCompleteness.of(counts)
        if not records.complete:
            found.append(f"repeat {index}: " + "; ".join(records.problems))
    return found


def evaluate_gate(
    gate: GateSettings, run: RunEvidence, records: RecordCompleteness | None = None
) -> GateVerdict:
    """One gate's verdict. The records' completeness (``records``, the run summary's counts when not given)
    is established first: a statistic over an incomplete run is NOT MEASURED (the completion and non-finite
    gates, whose claims are about completeness, FAIL), and a metric missing or non-finite at any step it
    must have is NOT MEASURED.

    A time gate (``timed_statistic``) of a run summarised with interval settings judges its value's
    interval (``interval_outcome``): the value pooled over the repeats and the interval, both from the
    summary's bootstrap. Without interval settings, or for a run too short for an interval, the value alone
    is compared."""
    summary = run.run_summary
    records = records or RecordCompleteness.of(summary.records[0])
    timed = timed_statistic(gate) if summary.interval_rule is not None else None
    try:
        if gate.statistic not in COMPLETENESS_STATISTICS and not records.complete:
            raise NotMeasured("the run's step records are incomplete: " + "; ".join(records.problems))
        problems = repeat_problems(summary) if timed else []
        if problems:
            raise NotMeasured("a repeat's step records are incomplete: " + "; ".join(problems))
        measured = measure(gate, run, records)
    except NotMeasured as reason:
        return GateVerdict.judged(gate, None, NOT_MEASURED, str(reason))
    timings = TimingReplicates.of_summary(summary) if timed else None
    if timings is not None and measured.value is not None and math.isfinite(measured.value):
        return judged(gate, _pooled(gate, timed, timings, measured))
    return judged(gate, measured)


def judged(gate: GateSettings, measured: Measured) -> GateVerdict:
    """The verdict on a measured value: its interval against the threshold when it has one, else the value;
    FAIL whatever the value when the measurement found a problem that fails the gate outright."""
    value, failures, interval = measured.value, measured.failures, measured.interval
    finite = value is not None and math.isfinite(value)
    passed = finite and COMPARE[gate.comparison](value, gate.threshold)
    outcome = PASS if passed else FAIL
    reasons = []
    if interval is not None and finite:
        outcome = interval_outcome(gate.comparison, gate.threshold, interval)
        span = f"its {interval.confidence:.0%} interval [{interval.low:.4g}, {interval.high:.4g}] {gate.unit}"
        if outcome == FAIL:
            reasons.append(
                f"measured {value:.4g} {gate.unit} is not {gate.comparison} {gate.threshold:g}: {span} "
                "lies wholly outside"
            )
        elif outcome == INCONCLUSIVE:
            reasons.append(
                f"measured {value:.4g} {gate.unit}, but {span} straddles {gate.comparison} "
                f"{gate.threshold:g}: within this run's noise it may pass or fail"
            )
    elif finite and not passed:
        reasons.append(f"measured {value:.4g} {gate.unit} is not {gate.comparison} {gate.threshold:g}")
    if not finite and not failures:
        reasons.append("the measured value is not a finite number")
    reasons += failures
    if failures or not finite:
        outcome = FAIL
    return GateVerdict.judged(
        gate, value if finite else None, outcome, "; ".join(reasons), measured.evidence, interval
    )


def _pooled(gate: GateSettings, timed: str, timings: TimingReplicates, measured: Measured) -> Measured:
    """A time gate's value (pooled over the repeats), its interval in the gate's unit, and its evidence
    with each repeat's value: the interval is the timing statistic's (the summary's bootstrap), scaled
    as the value is (to the gate's unit, or over the floor)."""
    evidence = measured.evidence
    column = list(TIMING_STATISTICS).index(timed)
    found = timings.interval(timed)
    scale = (
        1 / evidence.floor if gate.statistic == "floor_ratio" else to_gate_unit(1.0, gate.metric, gate.unit)
    )
    per_repeat = [float(v) for v in timings.per_repeat[:, column]]
    repeats = len(per_repeat)
    if repeats > 1:
        evidence = evidence.model_copy(update={"per_repeat": per_repeat})
    value = float(timings.values[column]) * scale
    if found is None:
        return Measured(value, evidence, measured.failures)
    basis = timings.basis()
    interval = GateInterval(
        low=found.low * scale,
        high=found.high * scale,
        unit=gate.unit,
        confidence=basis["confidence"],
        repeats=repeats,
        method=f"{basis['method']}; repeats: {basis['pooling']}; covers {basis['covers']}",
    )
    return Measured(value, evidence, measured.failures, interval)


CLAIM_DEVICES = ("5070", "4090")  # claim.md section 4: RTX 5070 8 GB + RTX 4090 24 GB


def faithfulness(deviations: Deviations, fingerprint: Fingerprint) -> Reproduction:
    """Whether the run reproduces the claim as published: its config unchanged and its hardware."""
    reasons = [
        f"{d.path}: {d.claim!r} -> {d.rendered!r} ({d.reason})" for d in deviations.changing_the_experiment
    ]
    names = [d.name for d in fingerprint.accelerator.devices]
    same_hardware = len(names) == 2 and all(any(tag in n for n in names) for tag in CLAIM_DEVICES)
    if not same_hardware:
        reasons.append(
            f"hardware differs from the claim's RTX 5070 + RTX 4090: "
            f"{', '.join(names) if names else 'no GPU (CPU accelerator)'}"
        )
    return Reproduction(faithful=not reasons, reasons=reasons)


def evaluate(gates: tuple[GateSettings, ...], run: RunEvidence) -> GateVerdicts:
    """All gates of the profile on the run's evidence (zerogate.analysis.evidence: its summary, parsed
    tables, run spec, deviations and probe; the plan with the measured compute term, parse_logs' run
    metadata and the rendered DeepSpeed config are optional: the gates that need them are NOT MEASURED
    without them). The warm-up, the interval settings and the spike rule are the run summary's (analysis
    settings: changing them re-summarises and re-judges, never retrains); the world size and the optimizer
    steps the records are counted against are the run spec's."""
    records = RecordCompleteness.of(run.run_summary.records[0])
    results = [evaluate_gate(gate, run, records) for gate in gates]
    counts = {v: sum(r.verdict == v for r in results) for v in GATE_OUTCOMES}
    return GateVerdicts(
        gates=results,
        counts=counts,
        reproduction=faithfulness(run.deviations, run.fingerprint),
        records=records.evidence(),
    )


def failed_gates(verdicts: GateVerdicts) -> list[str]:
    """The gates that FAIL, each as 'name: reason' (for the strict option)."""
    return [f"{g.name}: {g.reason}" for g in verdicts.failed]


def inconclusive_gates(verdicts: GateVerdicts) -> list[str]:
    """The gates that are INCONCLUSIVE, each as 'name: reason' (the strict option counts them apart from
    PASS: a claim this run cannot confirm does not pass)."""
    return [f"{g.name}: {g.reason}" for g in verdicts.inconclusive]
