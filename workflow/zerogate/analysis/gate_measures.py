"""What each gate measures: the statistic its settings name (a metric's slowest-rank median, p90 or max over
the ranks it selects, the loss's convergence, the faults, the failed ranks, the fp16 skips, the step over the
planner's floor), in the gate's unit, with its evidence. Every quantity is one of zerogate.analysis'
definitions (measures, health, loss_trend); the loss spikes and the warm-up are the run summary's.
zerogate.analysis.gates judges what :func:`measure` returns.

The evidence is typed per statistic (zerogate.contracts.verdicts): a slowest-rank evidence states the unit of
its per-rank values in ``metric_unit`` (and gives them in the gate's unit beside, where that differs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from zerogate.analysis import loss_trend, measures
from zerogate.analysis.columns import LOSS, STEP_TIME
from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.health import (
    Completion,
    RecordCompleteness,
    completion_of,
    missing_values,
    nonfinite_events,
    run_completion,
    step_span,
)
from zerogate.analysis.loss_trend import ConvergenceRule
from zerogate.analysis.parse import event_table, run_metadata
from zerogate.config.judging import GateSettings
from zerogate.contracts.intervals import GateInterval
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import TrainSummary, column
from zerogate.contracts.run import DsConfig
from zerogate.contracts.summary import LossSpikes
from zerogate.contracts.verdicts import (
    CompletionEvidence,
    ConvergenceEvidence,
    ConvergenceRuleEvidence,
    FailedRanksEvidence,
    FailureEvidence,
    FloorRatioEvidence,
    NonfiniteEvidence,
    OverflowEvidence,
    ProgressLineEvidence,
    SlowestRankEvidence,
)
from zerogate.units import GB, GIB


@dataclass(frozen=True)
class Measured:
    """A gate's measured value in its unit, its evidence, the problems that fail it outright whatever the
    value, and (a time gate's, once pooled over the repeats) the value's interval."""

    value: float | None
    evidence: Any
    failures: list[str] = field(default_factory=list)
    interval: GateInterval | None = None


class NotMeasured(Exception):
    """The gate's metric is missing from the run's records."""


def require_column(steps: pd.DataFrame, metric: str) -> pd.DataFrame:
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


def loss_convergence_gate(
    steps: pd.DataFrame, gate: GateSettings, spikes: LossSpikes
) -> tuple[float | None, list[str], ConvergenceEvidence]:
    """(final/initial loss ratio, problems that fail the gate outright, evidence): loss_trend.loss_convergence
    under the gate's ``convergence`` settings, over every step's loss."""
    require_column(steps, LOSS)
    rule = ConvergenceRule.from_gate(gate)
    found = loss_trend.loss_convergence(steps, rule)
    if not found.nonfinite_steps and found.steps < 2 * max(rule.initial_steps, 1):
        raise NotMeasured(f"only {found.steps} loss values: too few to tell a trend")
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
        spike_rule=spikes.rule,
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


def to_gate_unit(value: float, metric: str, unit: str) -> float:
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
    require_column(steps, metric)
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


def slowest_rank_gate(
    gate: GateSettings, steps: pd.DataFrame, fingerprint: Fingerprint, warmup_steps: int
) -> tuple[float, SlowestRankEvidence]:
    """A median, p90 or max gate: the statistic of each rank's series (after the warm-up, fp16-skipped steps
    out, for the times; over every step for a peak), then the worst rank, in the gate's unit."""
    statistic, metric = gate.statistic, gate.metric
    require_column(steps, metric)
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
        in_gate_unit = {rank: to_gate_unit(v, metric, gate.unit) for rank, v in result.per_rank.items()}
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
    return to_gate_unit(result.value, metric, gate.unit), evidence


def measure(gate: GateSettings, run: RunEvidence, records: RecordCompleteness) -> Measured:
    """The gate's statistic on the run (NotMeasured when the records cannot give it)."""
    steps, warmup = run.steps, run.run_summary.warmup_steps_excluded
    statistic = gate.statistic
    if statistic in ("median", "p90", "max"):
        return Measured(*slowest_rank_gate(gate, steps, run.fingerprint, warmup))
    if statistic == "loss_convergence":
        value, problems, evidence = loss_convergence_gate(steps, gate, run.run_summary.loss_spikes)
        return Measured(value, evidence, problems)
    if statistic == "floor_ratio":
        value, evidence = floor_ratio(steps, gate.metric, warmup, run.plan)
        # never clipped: a floor above the measurement is reported as the bug it is
        problems = [FLOOR_ABOVE_MEASUREMENT.format(floor=evidence.floor, measured=value * evidence.floor)]
        return Measured(value, evidence, problems if value < 1 else [])
    if statistic == "overflow_skip_fraction":
        return Measured(*overflow_skip_fraction(steps, run.run_meta, run.ds_config))
    if statistic not in ("failed_ranks", "nonfinite_count"):  # the settings admit no other statistic
        raise ValueError(f"unknown statistic {statistic}")
    if statistic == "failed_ranks" and run.run_meta is None and records.complete:
        raise NotMeasured("no run metadata (parse_logs output) to read rank failures from")
    expected = run.run_spec.training.optimizer_steps
    completion = completion_for(steps, run.events, run.train_summary, expected, run.run_meta, records)
    if statistic == "failed_ranks":
        value, evidence = failed_ranks(completion, records)
        return Measured(value, evidence, list(completion.problems))
    value, problems, evidence = nonfinite(steps, run.events, completion, gate.metric.split(","), records)
    return Measured(value, evidence, problems)
