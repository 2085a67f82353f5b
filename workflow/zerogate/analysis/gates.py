"""Judge the run against the profile's gates: each gate a record with its definition, the measured
value, the threshold and a verdict. A metric that was not measured is NOT MEASURED, never PASS.

Every measured quantity comes from zerogate.analysis.measures (the one definition the report, figures,
compare and the variant table share); this module only picks the quantity a gate names, converts it to
the gate's unit and compares. The evidence is typed per statistic (zerogate.contracts.verdicts): its keys
carry their units, e.g. ``floor(s)``, ``skipped_per_rank(steps)``; a slowest-rank evidence states the unit
of its per-rank values in ``metric_unit`` (and gives them in the gate's unit beside, where that differs).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from zerogate.analysis import loss_trend, measures
from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.columns import LOSS, STEP_TIME
from zerogate.analysis.health import (
    Completion,
    RecordCompleteness,
    completion_of,
    missing_values,
    nonfinite_events,
    record_completeness,
    run_completion,
    step_span,
)
from zerogate.analysis.intervals import TIMING_STATISTICS, IntervalRule, TimingReplicates
from zerogate.analysis.loss_trend import ConvergenceRule, SpikeRule, loss_spikes
from zerogate.analysis.parse import event_table, run_metadata
from zerogate.config.settings import GateSettings
from zerogate.contracts.intervals import GateInterval, Interval
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import TrainSummary, column
from zerogate.contracts.run import Deviations, DsConfig, RunSpec
from zerogate.contracts.verdicts import (
    FAIL,
    GATE_OUTCOMES,
    INCONCLUSIVE,
    NOT_MEASURED,
    PASS,
    CompletionEvidence,
    ConvergenceEvidence,
    ConvergenceRuleEvidence,
    FailedRanksEvidence,
    FailureEvidence,
    FloorRatioEvidence,
    GateVerdict,
    GateVerdicts,
    NonfiniteEvidence,
    OverflowEvidence,
    ProgressLineEvidence,
    Reproduction,
    SlowestRankEvidence,
)
from zerogate.units import GB, GIB

COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
}


class NotMeasured(Exception):
    """The gate's metric is missing from the run's records."""


def _column(steps: pd.DataFrame, metric: str) -> pd.DataFrame:
    if metric not in steps.columns or steps[metric].isna().all():
        raise NotMeasured(f"no '{metric}' values in the run's step records")
    return steps


def unit_of(metric: str) -> str:
    """The unit a metric's key carries, as the evidence keys write it: ``(s)``, ``(GiB)``; empty if none."""
    found = re.search(r"\([^()]*\)$", metric)
    return found.group(0) if found else ""


def smallest_device_ranks(steps: pd.DataFrame, fingerprint: Fingerprint) -> tuple[list[int], str]:
    """Ranks placed on the device with the least memory (all ranks on the CPU accelerator)."""
    ranks = sorted(int(r) for r in steps["rank"].unique())
    devices = fingerprint.accelerator.devices
    if fingerprint.accelerator.kind != "cuda" or not devices:
        return ranks, "CPU accelerator: all ranks share host memory"
    # One rank per GPU on a single node: rank r runs on cuda:r.
    smallest = min(d.memory_total_bytes for d in devices)
    chosen = [r for r in ranks if r < len(devices) and devices[r].memory_total_bytes == smallest]
    names = sorted({devices[r].name for r in chosen})
    return chosen, f"smallest device: {', '.join(names)} ({smallest / GIB:.2f} GiB)"


def loss_convergence(
    steps: pd.DataFrame, gate: GateSettings, spike_rule: SpikeRule
) -> tuple[float | None, list[str], ConvergenceEvidence]:
    """(final/initial loss ratio, problems that fail the gate outright, evidence): measures.loss_convergence
    under the gate's ``convergence`` settings, over every step's loss."""
    _column(steps, LOSS)
    rule = ConvergenceRule.from_gate(gate)
    found = loss_trend.loss_convergence(steps, rule)
    if not found.nonfinite_steps and found.steps < 2 * max(rule.initial_steps, 1):
        raise NotMeasured(f"only {found.steps} loss values: too few to tell a trend")
    spikes = loss_spikes(steps, spike_rule)
    evidence = ConvergenceEvidence(
        steps=found.steps,
        nonfinite_loss_steps=found.nonfinite_steps,
        initial_loss=_finite_or_none(found.initial),
        final_loss=_finite_or_none(found.final),
        lowest_block_mean_loss=_finite_or_none(found.lowest_block),
        final_block_spread=_finite_or_none(found.final_spread),
        rebound=_finite_or_none(found.rebound),
        drop_sigmas=_finite_or_none(found.drop_sigmas),
        rule=ConvergenceRuleEvidence(
            initial_steps=rule.initial_steps,
            final_fraction=rule.final_fraction,
            max_rebound=rule.max_rebound,
            min_drop_sigmas=rule.min_drop_sigmas,
        ),
        spikes=spikes.count,
        spike_steps=spikes.steps,
        spike_rule=spike_rule.describe(),
    )
    return _finite_or_none(found.ratio), found.problems(rule), evidence


def _finite_or_none(value: float) -> float | None:
    """A number for the evidence: None where it is not finite (JSON has no NaN)."""
    return float(value) if value is not None and math.isfinite(value) else None


def nonfinite(
    steps: pd.DataFrame,
    events: pd.DataFrame,
    completion: Completion,
    metrics: list[str],
    records: RecordCompleteness,
) -> tuple[float, list[str], NonfiniteEvidence]:
    """(faults: one per optimizer step with a non-finite value, plus one for a fatal loss-scale abort;
    problems that fail the gate outright; evidence)."""
    present = [m for m in metrics if m in steps.columns]
    if not present and completion.complete:
        raise NotMeasured(f"none of {metrics} in the run's step records")
    faults = nonfinite_events(steps, present, stabiliser_nonfinite(events))
    fatal = events[events["kind"] == "fatal_loss_scale"] if len(events) else events
    fatal_ranks = sorted({int(r) for r in fatal["rank"].dropna()}) if len(fatal) else []
    evidence = NonfiniteEvidence(
        faults=len(faults) + (1 if len(fatal) else 0),
        nonfinite_steps=len(faults),
        nonfinite_events=[f.evidence() for f in faults],
        fatal_loss_scale_abort=bool(len(fatal)),
        fatal_loss_scale_ranks=fatal_ranks,
        metrics=present,
        records=records.evidence(),
        **completion_evidence(completion).model_dump(),
    )
    return float(evidence.faults), list(completion.problems), evidence


def stabiliser_nonfinite(events: pd.DataFrame) -> list[tuple[int, int | None, str]]:
    """(step, rank, kind) of each non-finite loss or gradient norm the loss stabiliser caught (any action)."""
    rows = event_table(events, "stabiliser")
    if not len(rows):
        return []
    return [
        (int(step), None if pd.isna(rank) else int(rank), str(kind))
        for step, rank, kind in zip(rows["step"], rows["rank"], rows["kind"])
        if str(kind).startswith("nonfinite")
    ]


def _in_unit(value: float, metric: str, unit: str) -> float:
    """Convert a measured value to the gate's unit (memory is logged in GiB)."""
    if unit_of(metric) == "(GiB)" and unit == "GB":
        return value * GIB / GB
    return value


def require_values(pool: pd.DataFrame, metric: str) -> None:
    """NOT MEASURED when ``metric`` is missing or non-finite at any step of ``pool``, naming where."""
    gaps = missing_values(pool, metric)
    if gaps:
        where = "; ".join(
            f"rank {rank}: {len(listed)} steps ({step_span(listed)})" for rank, listed in gaps.items()
        )
        raise NotMeasured(f"'{metric}' missing or non-finite at {where}")


def floor_ratio(
    steps: pd.DataFrame, metric: str, warmup_steps: int, plan: Plan | None
) -> tuple[float, FloorRatioEvidence]:
    """Median optimizer-step time (slowest rank) over the planner's physical floor for this machine."""
    floor = None if plan is None else plan.floor.optimizer_step_floor_s
    if floor is None:
        raise NotMeasured("no physical floor: the planner's plan.json is absent or gives none")
    if floor <= 0:
        raise NotMeasured(f"the planner's floor is {floor} s, not a positive time")
    if metric != STEP_TIME:
        raise NotMeasured(f"a floor bounds the optimizer step ({STEP_TIME}), not {metric}")
    _column(steps, metric)
    pool = measures.timed_steps(steps, warmup_steps)
    require_values(pool, metric)
    result = measures.slowest_rank(pool, metric, "median")
    evidence = FloorRatioEvidence(
        per_rank=result.per_rank,
        worst_rank=result.rank,
        median_step_time=result.value,
        floor=floor,
        warmup_steps_excluded=warmup_steps,
        floor_terms=floor_terms(plan),
    )
    return result.value / floor, evidence


FLOOR_ABOVE_MEASUREMENT = (
    "the planner's floor ({floor:.4g} s) is above the measured step ({measured:.4g} s): a floor "
    "is a lower bound, so this is a bug in the floor's terms or figures (or in the measurement), "
    "not a result"
)


def floor_terms(plan: Plan) -> dict[str, float | None]:
    """The floor's terms per optimizer step as the plan gives them (zerogate.predict.floor): the deciding
    rank's micro-step terms times the accumulation, the boundary's collectives and the optimizer update.
    The micro-step terms overlap (the floor takes the largest), the others add; empty without them."""
    steps = plan.floor
    ranks = [r for r in steps.ranks if r.micro_step_floor_s is not None]
    if not ranks:
        return {}
    deciding = max(ranks, key=lambda r: r.micro_step_floor_s)
    g = steps.accumulation
    terms: dict[str, float | None] = {
        f"micro_step {k.removesuffix('(s)')} x {g}(s)": None if v is None else g * v
        for k, v in deciding.terms.items()
    }
    terms.update({f"boundary {k}": v for k, v in steps.boundary_terms.items()})
    terms.update({f"optimizer {k}": v for k, v in steps.optimizer_terms.items()})
    return terms


def overflow_skip_fraction(
    steps: pd.DataFrame, run_meta: RunMeta | None, ds_config: DsConfig | None
) -> tuple[float, OverflowEvidence]:
    """Fraction of optimizer steps that fp16 skipped (worst rank). Whether there is a loss scaler at all is
    the rendered DeepSpeed config's to say, never a log line's; then the count comes from the step records'
    skip reasons (measures.overflow_skips). DeepSpeed's own ``skipped=`` count from its last progress line
    is shown beside it as evidence only: it also counts the updates the loss stabiliser dropped."""
    if ds_config is None:
        raise NotMeasured("no rendered DeepSpeed config: whether the run had a loss scaler is unknown")
    if not ds_config.loss_scaler:
        raise NotMeasured("the rendered DeepSpeed config has no fp16 loss scaler: nothing for it to skip")
    skips = measures.overflow_skips(steps)
    if skips is None:
        raise NotMeasured("fp16 is on but the step records hold no loss scale or skip reason to count from")
    progress = None if run_meta is None else run_meta.deepspeed_skipped_steps
    evidence = OverflowEvidence(
        source="per-step records (skip_reason)",
        skip_fraction_per_rank=skips.fraction_per_rank,
        skipped_per_rank=skips.per_rank,
        deepspeed_progress_line=None
        if progress is None
        else ProgressLineEvidence(
            at_step=progress.step,
            skipped=progress.skipped,
            note="DeepSpeed's count also includes the updates the loss stabiliser dropped; not the statistic",
        ),
    )
    return skips.worst_fraction, evidence


def completion_evidence(completion: Completion) -> CompletionEvidence:
    failures = [
        FailureEvidence(
            rank=f.rank, kind=f.kind, message=f.message, exit_code=f.exit_code, last_lines=f.last_lines
        )
        for f in completion.failures
    ]
    return CompletionEvidence(
        finished=completion.finished,
        failures=failures,
        last_step_per_rank=completion.steps_per_rank,
        stopped_early_at=completion.stopped_early,
        failed_ranks=completion.failed_ranks,
        run_complete=completion.complete,
    )


def failed_ranks(completion: Completion, records: RecordCompleteness) -> tuple[float, FailedRanksEvidence]:
    """Ranks that crashed, exited non-zero, stopped before the last step or lack step records
    (run_completion with the record counts), with their last log lines."""
    return float(completion.failed_rank_count), FailedRanksEvidence(
        records=records.evidence(), **completion_evidence(completion).model_dump()
    )


def completion_for(
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    expected_steps: int,
    run_meta: RunMeta | None,
    records: RecordCompleteness | None = None,
) -> Completion:
    """The run's completion from parse_logs' metadata, or, without it, from the same parse over the step
    records and events (no launcher log text: the failures then lack their last lines); with the record
    counts of ``records``."""
    if run_meta is None:
        run_meta = run_metadata(steps, events, summary, "", expected_steps)
    completion = completion_of(run_meta)
    if records is None:
        return completion
    return run_completion(
        completion.steps_per_rank,
        completion.failures,
        completion.finished,
        run_meta.expected_steps or expected_steps,
        records.world_size,
        records,
    )


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


class Repeats:
    """The other repeats of a run (profile key ``repeats``): their steps tables, counted like the first
    run's, for the time gates that pool them."""

    def __init__(self, tables: list[pd.DataFrame], world_size: int, expected_steps: int):
        self.tables = list(tables)
        self.records = [record_completeness(t, world_size, expected_steps) for t in self.tables]

    def problems(self) -> list[str]:
        return [
            f"repeat {index}: " + "; ".join(r.problems)
            for index, r in enumerate(self.records, start=1)
            if not r.complete
        ]


def evaluate_gate(
    gate: GateSettings,
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    fingerprint: Fingerprint,
    warmup_steps: int,
    expected_steps: int,
    spike_rule: SpikeRule,
    plan: Plan | None = None,
    run_meta: RunMeta | None = None,
    *,
    world_size: int,
    ds_config: DsConfig | None = None,
    records: RecordCompleteness | None = None,
    interval_rule: IntervalRule | None = None,
    repeats: Repeats | None = None,
    timings: TimingReplicates | None = None,
) -> GateVerdict:
    """One gate's verdict. The records' completeness is established first, from counts: a statistic over
    an incomplete run is NOT MEASURED (the completion and non-finite gates, whose claims are about
    completeness, FAIL), and a metric missing or non-finite at any step it must have is NOT MEASURED.

    A time gate (``timed_statistic``) with ``interval_rule`` judges its value's interval
    (``interval_outcome``); with ``repeats`` its value pools them (measures.pool) and so does the interval.
    ``timings`` (timing_replicates of all repeats) is computed here when not given. Without
    ``interval_rule``, or for a run too short for an interval, the value alone is compared."""
    records = records or record_completeness(steps, world_size, expected_steps)
    extra_failures: list[str] = []
    measured: float | None
    evidence: Any
    timed = timed_statistic(gate) if interval_rule is not None else None
    try:
        statistic = gate.statistic
        if statistic not in ("failed_ranks", "nonfinite_count") and not records.complete:
            raise NotMeasured("the run's step records are incomplete: " + "; ".join(records.problems))
        if timed and repeats is not None and repeats.problems():
            raise NotMeasured("a repeat's step records are incomplete: " + "; ".join(repeats.problems()))
        if timed and timings is None:
            timings = timing_replicates(
                [steps, *(repeats.tables if repeats else [])], warmup_steps, interval_rule
            )
        if statistic in ("median", "p90", "max"):
            measured, evidence = slowest_rank_gate(gate, steps, fingerprint, warmup_steps)
        elif statistic == "loss_convergence":
            measured, problems, evidence = loss_convergence(steps, gate, spike_rule)
            extra_failures.extend(problems)
        elif statistic == "floor_ratio":
            measured, evidence = floor_ratio(steps, gate.metric, warmup_steps, plan)
            if measured < 1:  # never clipped: a floor above the measurement is reported as the bug it is
                extra_failures.append(
                    FLOOR_ABOVE_MEASUREMENT.format(floor=evidence.floor, measured=measured * evidence.floor)
                )
        elif statistic == "overflow_skip_fraction":
            measured, evidence = overflow_skip_fraction(steps, run_meta, ds_config)
        elif statistic == "failed_ranks":
            if run_meta is None and records.complete:
                raise NotMeasured("no run metadata (parse_logs output) to read rank failures from")
            completion = completion_for(steps, events, summary, expected_steps, run_meta, records)
            measured, evidence = failed_ranks(completion, records)
            extra_failures.extend(completion.problems)
        elif statistic == "nonfinite_count":
            completion = completion_for(steps, events, summary, expected_steps, run_meta, records)
            measured, problems, evidence = nonfinite(
                steps, events, completion, gate.metric.split(","), records
            )
            extra_failures.extend(problems)
        else:  # the settings admit no other statistic
            raise ValueError(f"unknown statistic {statistic}")
    except NotMeasured as reason:
        return GateVerdict.judged(gate, None, NOT_MEASURED, str(reason))
    interval = None
    if timed and timings is not None and measured is not None and math.isfinite(measured):
        measured, interval, evidence = _pooled(gate, timed, timings, measured, evidence)
    finite = measured is not None and math.isfinite(measured)
    passed = finite and COMPARE[gate.comparison](measured, gate.threshold)
    outcome = PASS if passed else FAIL
    reasons = []
    if interval is not None and finite:
        outcome = interval_outcome(gate.comparison, gate.threshold, interval)
        span = f"its {interval.confidence:.0%} interval [{interval.low:.4g}, {interval.high:.4g}] {gate.unit}"
        if outcome == FAIL:
            reasons.append(
                f"measured {measured:.4g} {gate.unit} is not {gate.comparison} {gate.threshold:g}: {span} "
                "lies wholly outside"
            )
        elif outcome == INCONCLUSIVE:
            reasons.append(
                f"measured {measured:.4g} {gate.unit}, but {span} straddles {gate.comparison} "
                f"{gate.threshold:g}: within this run's noise it may pass or fail"
            )
    elif finite and not passed:
        reasons.append(f"measured {measured:.4g} {gate.unit} is not {gate.comparison} {gate.threshold:g}")
    if not finite and not extra_failures:
        reasons.append("the measured value is not a finite number")
    reasons += extra_failures
    if extra_failures or not finite:
        outcome = FAIL
    return GateVerdict.judged(
        gate, measured if finite else None, outcome, "; ".join(reasons), evidence, interval
    )


def _pooled(
    gate: GateSettings, timed: str, timings: TimingReplicates, measured: float, evidence: Any
) -> tuple[float, GateInterval | None, Any]:
    """A time gate's value (pooled over the repeats), its interval in the gate's unit, and its evidence
    with each repeat's value: the interval is the timing statistic's (timing_replicates), scaled
    as the value is (to the gate's unit, or over the floor)."""
    column = list(TIMING_STATISTICS).index(timed)
    found = timings.interval(timed)
    scale = 1 / evidence.floor if gate.statistic == "floor_ratio" else _in_unit(1.0, gate.metric, gate.unit)
    per_repeat = [float(v) for v in timings.per_repeat[:, column]]
    repeats = len(per_repeat)
    if repeats > 1:
        key = "per_repeat"
        evidence = evidence.model_copy(update={key: per_repeat})
    value = float(timings.values[column]) * scale
    if found is None:
        return value, None, evidence
    basis = timings.basis()
    interval = GateInterval(
        low=found.low * scale,
        high=found.high * scale,
        unit=gate.unit,
        confidence=basis["confidence"],
        repeats=repeats,
        method=f"{basis['method']}; repeats: {basis['pooling']}; covers {basis['covers']}",
    )
    return value, interval, evidence


def slowest_rank_gate(
    gate: GateSettings, steps: pd.DataFrame, fingerprint: Fingerprint, warmup_steps: int
) -> tuple[float, SlowestRankEvidence]:
    """A median, p90 or max gate: the statistic of each rank's series (after the warm-up, fp16-skipped steps
    out, for the times; over every step for a peak), then the worst rank, in the gate's unit."""
    statistic, metric = gate.statistic, gate.metric
    _column(steps, metric)
    timing = statistic != "max"
    pool = measures.timed_steps(steps, warmup_steps) if timing else steps
    skipped = measures.overflow_skipped_count(steps, warmup_steps) if timing else None
    device_selection = memory_source = None
    if metric.startswith("memory/") and gate.ranks == "smallest_device":
        ranks, device_selection = smallest_device_ranks(steps, fingerprint)
        pool = pool[pool["rank"].isin(ranks)]
        source = column("device_peak_source")
        if source in steps.columns:
            memory_source = sorted(steps[source].dropna().unique().tolist())
    if not len(pool):
        raise NotMeasured(f"no '{metric}' values after warm-up")
    require_values(pool, metric)
    result = measures.slowest_rank(pool, metric, statistic)
    in_gate_unit = None
    if unit_of(metric) != f"({gate.unit})":  # the per-rank values in the gate's unit too
        in_gate_unit = {rank: _in_unit(v, metric, gate.unit) for rank, v in result.per_rank.items()}
    p90 = (
        measures.slowest_rank(pool, metric, "p90").value
        if statistic == "median" and metric == STEP_TIME
        else None
    )
    evidence = SlowestRankEvidence(
        warmup_steps_excluded=warmup_steps if timing else 0,
        overflow_skipped_steps_excluded=skipped,
        device_selection=device_selection,
        memory_source=memory_source,
        metric_unit=unit_of(metric).strip("()"),
        per_rank=result.per_rank,
        worst_rank=result.rank,
        per_rank_in_gate_unit=in_gate_unit,
        p90=p90,
    )
    return _in_unit(result.value, metric, gate.unit), evidence


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


def evaluate(
    gates: tuple[GateSettings, ...],
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    run_spec: RunSpec,
    deviations: Deviations,
    fingerprint: Fingerprint,
    warmup_steps: int,
    spike_rule: SpikeRule,
    plan: Plan | None = None,
    run_meta: RunMeta | None = None,
    ds_config: DsConfig | None = None,
    interval_rule: IntervalRule | None = None,
    repeat_steps: list[pd.DataFrame] = (),
) -> GateVerdicts:
    """All gates of the profile. ``warmup_steps`` is the profile's ``training.warmup_steps_excluded`` and
    ``spike_rule`` the run's ``stabiliser`` settings (both analysis inputs: changing them re-judges). The
    world size and the optimizer steps are the run spec's. ``plan`` (the planner's plan with the measured
    compute term), ``run_meta`` (parse_logs' run.json) and ``ds_config`` (the rendered DeepSpeed config) are
    optional: the gates that need them are NOT MEASURED without them. ``interval_rule`` (the profile's
    ``intervals``) gives the time gates their intervals; ``repeat_steps`` are the other repeats' steps
    tables (profile key ``repeats``), which the time gates pool with ``steps``."""
    expected = run_spec.training.optimizer_steps
    records = record_completeness(steps, run_spec.world_size, expected)
    repeats = Repeats(list(repeat_steps), run_spec.world_size, expected)
    timings = None
    if interval_rule is not None and records.complete and not repeats.problems():
        timings = timing_replicates([steps, *repeats.tables], warmup_steps, interval_rule)
    results = [
        evaluate_gate(
            g,
            steps,
            events,
            summary,
            fingerprint,
            warmup_steps,
            expected,
            spike_rule,
            plan,
            run_meta,
            world_size=run_spec.world_size,
            ds_config=ds_config,
            records=records,
            interval_rule=interval_rule,
            repeats=repeats,
            timings=timings,
        )
        for g in gates
    ]
    counts = {v: sum(r.verdict == v for r in results) for v in GATE_OUTCOMES}
    return GateVerdicts(
        gates=results,
        counts=counts,
        reproduction=faithfulness(deviations, fingerprint),
        records=records.evidence(),
    )


def failed_gates(verdicts: GateVerdicts) -> list[str]:
    """The gates that FAIL, each as 'name: reason' (for the strict option)."""
    return [f"{g.name}: {g.reason}" for g in verdicts.failed]


def inconclusive_gates(verdicts: GateVerdicts) -> list[str]:
    """The gates that are INCONCLUSIVE, each as 'name: reason' (the strict option counts them apart from
    PASS: a claim this run cannot confirm does not pass)."""
    return [f"{g.name}: {g.reason}" for g in verdicts.inconclusive]
