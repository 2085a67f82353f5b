"""Judge the run against the profile's gates: each gate a record with its definition, the measured
value, the threshold and a verdict. A metric that was not measured is NOT MEASURED, never PASS.

Every measured quantity comes from zerogate.analysis.measures (the one definition the report, figures,
compare and the variant table share); this module only picks the quantity a gate names, converts it to
the gate's unit and compares. Evidence keys carry their units, e.g. ``per_rank(s)``, ``floor(s)``.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable

import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.measures import Completion, ConvergenceRule, SpikeRule
from zerogate.analysis.parse import event_table, run_metadata
from zerogate.units import GB, GIB

PASS, FAIL, NOT_MEASURED = "PASS", "FAIL", "NOT MEASURED"
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, ">=": operator.ge, ">": operator.gt,
}


class NotMeasured(Exception):
    """The gate's metric is missing from the run's records."""


def _column(steps: pd.DataFrame, metric: str) -> pd.DataFrame:
    if metric not in steps.columns or steps[metric].isna().all():
        raise NotMeasured(f"no '{metric}' values in the run's step records")
    return steps


def physical_floor_seconds(plan: dict[str, Any] | None) -> float | None:
    """The planner's lower bound on one optimizer step on this machine (plan.json, issue 3).

    Read from ``plan["floor"]["optimizer_step(s)"]`` (or a top-level ``"optimizer_step_floor(s)"``);
    None when there is no plan or it gives no floor.
    """
    if not plan:
        return None
    value = (plan.get("floor") or {}).get("optimizer_step(s)", plan.get("optimizer_step_floor(s)"))
    return float(value) if value is not None else None


def unit_of(metric: str) -> str:
    """The unit a metric's key carries, as the evidence keys write it: ``(s)``, ``(GiB)``; empty if none."""
    found = re.search(r"\([^()]*\)$", metric)
    return found.group(0) if found else ""


def slowest_rank_evidence(pool: pd.DataFrame, metric: str, statistic: str) -> tuple[float, dict[str, Any]]:
    """measures.slowest_rank with its per-rank values as evidence (in the metric's unit)."""
    result = measures.slowest_rank(pool, metric, statistic)
    return result.value, {f"per_rank{unit_of(metric)}": result.per_rank, "worst_rank(rank)": result.rank}


def smallest_device_ranks(steps: pd.DataFrame, fingerprint: dict[str, Any]) -> tuple[list[int], str]:
    """Ranks placed on the device with the least memory (all ranks on the CPU accelerator)."""
    ranks = sorted(int(r) for r in steps["rank"].unique())
    devices = fingerprint["accelerator"]["devices"]
    if fingerprint["accelerator"]["kind"] != "cuda" or not devices:
        return ranks, "CPU accelerator: all ranks share host memory"
    # One rank per GPU on a single node: rank r runs on cuda:r.
    smallest = min(d["memory_total_bytes"] for d in devices)
    chosen = [r for r in ranks if r < len(devices) and devices[r]["memory_total_bytes"] == smallest]
    names = sorted({devices[r]["name"] for r in chosen})
    return chosen, f"smallest device: {', '.join(names)} ({smallest / GIB:.2f} GiB)"


def loss_convergence(steps: pd.DataFrame, gate: dict[str, Any],
                     spike_rule: SpikeRule) -> tuple[float | None, list[str], dict[str, Any]]:
    """(final/initial loss ratio, problems that fail the gate outright, evidence): measures.loss_convergence
    under the gate's ``convergence`` settings, over every step's loss."""
    _column(steps, "loss")
    rule = ConvergenceRule.from_gate(gate)
    found = measures.loss_convergence(steps, rule)
    if not found.nonfinite_steps and found.steps < 2 * max(rule.initial_steps, 1):
        raise NotMeasured(f"only {found.steps} loss values: too few to tell a trend")
    spikes = measures.loss_spikes(steps, spike_rule)
    evidence = {
        "steps(steps)": found.steps,
        "nonfinite_loss_steps(step)": found.nonfinite_steps,
        "initial_loss(nats/token)": _finite_or_none(found.initial),
        "final_loss(nats/token)": _finite_or_none(found.final),
        "lowest_block_mean_loss(nats/token)": _finite_or_none(found.lowest_block),
        "final_block_spread(nats/token)": _finite_or_none(found.final_spread),
        "rebound(ratio)": _finite_or_none(found.rebound),
        "drop(final-block sigmas)": _finite_or_none(found.drop_sigmas),
        "rule": {"initial_steps(steps)": rule.initial_steps, "final_fraction(ratio)": rule.final_fraction,
                 "max_rebound(ratio)": rule.max_rebound, "min_drop(final-block sigmas)": rule.min_drop_sigmas},
        "spikes(count)": spikes.count,
        "spike_steps(step)": spikes.steps,
        "spike_rule": spike_rule.describe(),
    }
    return _finite_or_none(found.ratio), found.problems(rule), evidence


def _finite_or_none(value: float) -> float | None:
    """A number for the evidence: None where it is not finite (JSON has no NaN)."""
    return float(value) if value is not None and math.isfinite(value) else None


def nonfinite(steps: pd.DataFrame, events: pd.DataFrame, completion: Completion,
              metrics: list[str]) -> tuple[float, list[str], dict[str, Any]]:
    """(faults: one per optimizer step with a non-finite value, plus one for a fatal loss-scale abort;
    problems that fail the gate outright; evidence)."""
    present = [m for m in metrics if m in steps.columns]
    if not present and completion.complete:
        raise NotMeasured(f"none of {metrics} in the run's step records")
    faults = measures.nonfinite_events(steps, present, stabiliser_nonfinite(events))
    fatal = events[events["kind"] == "fatal_loss_scale"] if len(events) else events
    fatal_ranks = sorted({int(r) for r in fatal["rank"].dropna()}) if len(fatal) else []
    evidence = {"faults(count)": len(faults) + (1 if len(fatal) else 0),
                "nonfinite_steps(count)": len(faults),
                "nonfinite_events": [f.evidence() for f in faults],
                "fatal_loss_scale_abort": bool(len(fatal)), "fatal_loss_scale_ranks(rank)": fatal_ranks,
                "metrics": present, **completion_evidence(completion)}
    return float(evidence["faults(count)"]), list(completion.problems), evidence


def stabiliser_nonfinite(events: pd.DataFrame) -> list[tuple[int, int | None, str]]:
    """(step, rank, kind) of each non-finite loss or gradient norm the loss stabiliser caught (any action)."""
    rows = event_table(events, "stabiliser")
    if not len(rows):
        return []
    return [(int(step), None if pd.isna(rank) else int(rank), str(kind))
            for step, rank, kind in zip(rows["step"], rows["rank"], rows["kind"]) if str(kind).startswith("nonfinite")]


def _in_unit(value: float, metric: str, unit: str) -> float:
    """Convert a measured value to the gate's unit (memory is logged in GiB)."""
    if "(GiB)" in metric and unit == "GB":
        return value * GIB / GB
    return value


def require_values(pool: pd.DataFrame, metric: str) -> None:
    """NOT MEASURED when ``metric`` is missing or non-finite at any step of ``pool``, naming where."""
    gaps = measures.missing_values(pool, metric)
    if gaps:
        where = "; ".join(f"rank {rank}: {len(listed)} steps ({measures._span(listed)})" for rank, listed in gaps.items())
        raise NotMeasured(f"'{metric}' missing or non-finite at {where}")


def floor_ratio(steps: pd.DataFrame, metric: str, warmup_steps: int,
                plan: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    """Median optimizer-step time (slowest rank) over the planner's physical floor for this machine."""
    floor = physical_floor_seconds(plan)
    if floor is None:
        raise NotMeasured("no physical floor: the planner's plan.json is absent or gives none")
    if floor <= 0:
        raise NotMeasured(f"the planner's floor is {floor} s, not a positive time")
    _column(steps, metric)
    pool = measures.timed_steps(steps, warmup_steps)
    require_values(pool, metric)
    median, evidence = slowest_rank_evidence(pool, metric, "median")
    evidence.update({f"median_step_time{unit_of(metric)}": median, "floor(s)": floor,
                     "warmup_steps_excluded(steps)": warmup_steps})
    terms = floor_terms(plan)
    if terms:
        evidence["floor_terms(s)"] = terms
    return median / floor, evidence


FLOOR_ABOVE_MEASUREMENT = ("the planner's floor ({floor:.4g} s) is above the measured step ({measured:.4g} s): a floor "
                           "is a lower bound, so this is a bug in the floor's terms or figures (or in the measurement), "
                           "not a result")


def floor_terms(plan: dict[str, Any] | None) -> dict[str, float | None]:
    """The floor's terms per optimizer step as the plan gives them (zerogate.plan.floor): the deciding
    rank's micro-step terms times the accumulation, the boundary's collectives and the optimizer update.
    The micro-step terms overlap (the floor takes the largest), the others add; empty without them."""
    steps = (plan or {}).get("floor") or {}
    ranks = [r for r in steps.get("ranks", []) if r.get("micro_step_floor(s)") is not None]
    if not ranks or "accumulation" not in steps:
        return {}
    deciding = max(ranks, key=lambda r: r["micro_step_floor(s)"])
    g = steps["accumulation"]
    terms: dict[str, float | None] = {f"micro_step {k.removesuffix('(s)')} x {g}(s)": None if v is None else g * v
                                      for k, v in deciding["terms"].items()}
    terms.update({f"boundary {k}": v for k, v in steps.get("boundary_terms", {}).items()})
    terms.update({f"optimizer {k}": v for k, v in steps.get("optimizer_terms", {}).items()})
    return terms


def overflow_skip_fraction(steps: pd.DataFrame, run_meta: dict[str, Any] | None,
                           ds_config: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    """Fraction of optimizer steps that fp16 skipped (worst rank). Whether there is a loss scaler at all is
    the rendered DeepSpeed config's to say, never a log line's; then the count comes from the step records'
    skip reasons (measures.overflow_skips). DeepSpeed's own ``skipped=`` count from its last progress line
    is shown beside it as evidence only: it also counts the updates the loss stabiliser dropped."""
    if ds_config is None:
        raise NotMeasured("no rendered DeepSpeed config: whether the run had a loss scaler is unknown")
    if not measures.loss_scaler_configured(ds_config):
        raise NotMeasured("the rendered DeepSpeed config has no fp16 loss scaler: nothing for it to skip")
    skips = measures.overflow_skips(steps)
    if skips is None:
        raise NotMeasured("fp16 is on but the step records hold no loss scale or skip reason to count from")
    evidence: dict[str, Any] = {"source": "per-step records (skip_reason)",
                                "skip_fraction_per_rank(ratio)": skips.fraction_per_rank,
                                "skipped_per_rank(steps)": skips.per_rank}
    progress = (run_meta or {}).get("deepspeed_skipped_steps")
    if progress:
        evidence["deepspeed_progress_line"] = {
            "at_step(step)": progress["step"], "skipped(steps)": progress["skipped"],
            "note": "DeepSpeed's count also includes the updates the loss stabiliser dropped; not the statistic"}
    return skips.worst_fraction, evidence


def completion_evidence(completion: Completion) -> dict[str, Any]:
    failures = [{"rank(rank)": f.get("rank"), "kind": f.get("kind"), "message": f.get("message"),
                 "exit_code(code)": f.get("exit_code"), "last_lines": f.get("last_lines")}
                for f in completion.failures]
    return {"finished": completion.finished, "failures": failures,
            "last_step_per_rank(step)": completion.steps_per_rank,
            "stopped_early_at(step)": completion.stopped_early, "failed_ranks(rank)": completion.failed_ranks,
            "run_complete": completion.complete}


def failed_ranks(completion: Completion, records: measures.RecordCompleteness) -> tuple[float, dict[str, Any]]:
    """Ranks that crashed, exited non-zero, stopped before the last step or lack step records
    (measures.run_completion with the record counts), with their last log lines."""
    return float(completion.failed_rank_count), {**completion_evidence(completion), "records": records.evidence()}


def completion_for(steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None, expected_steps: int,
                   run_meta: dict[str, Any] | None, records: measures.RecordCompleteness | None = None) -> Completion:
    """The run's completion from parse_logs' metadata, or, without it, from the same parse over the step
    records and events (no launcher log text: the failures then lack their last lines); with the record
    counts of ``records``."""
    if run_meta is None:
        run_meta = run_metadata(steps, events, summary, "", expected_steps)
    completion = measures.completion_of(run_meta)
    if records is None:
        return completion
    return measures.run_completion(completion.steps_per_rank, completion.failures, completion.finished,
                                   run_meta.get("expected_steps") or expected_steps, records.world_size, records)


def world_size_of(summary: dict[str, Any] | None, run_meta: dict[str, Any] | None) -> int | None:
    """The run's world size where no run spec gives it: the summary's, else parse_logs' (which takes the
    summary's too); never the number of ranks that happen to have records."""
    for source in (summary, run_meta):
        if source and source.get("world_size"):
            return int(source["world_size"])
    return None


def evaluate_gate(gate: dict[str, Any], steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None,
                  fingerprint: dict[str, Any], warmup_steps: int, expected_steps: int, spike_rule: SpikeRule,
                  plan: dict[str, Any] | None = None, run_meta: dict[str, Any] | None = None, *,
                  world_size: int | None = None, ds_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One gate's verdict. The records' completeness is established first, from counts: a statistic over
    an incomplete run is NOT MEASURED (the completion and non-finite gates, whose claims are about
    completeness, FAIL), and a metric missing or non-finite at any step it must have is NOT MEASURED."""
    result = {key: gate[key] for key in ("name", "claim", "definition", "metric", "statistic", "comparison",
                                         "threshold", "unit")}
    records = measures.record_completeness(steps, world_size or world_size_of(summary, run_meta), expected_steps)
    extra_failures: list[str] = []
    measured: float | None
    try:
        statistic = gate["statistic"]
        if statistic not in ("failed_ranks", "nonfinite_count") and not records.complete:
            raise NotMeasured("the run's step records are incomplete: " + "; ".join(records.problems))
        if statistic in ("median", "p90", "max"):
            metric = gate["metric"]
            _column(steps, metric)
            pool = measures.timed_steps(steps, warmup_steps) if statistic != "max" else steps
            evidence: dict[str, Any] = {"warmup_steps_excluded(steps)": warmup_steps if statistic != "max" else 0}
            if statistic != "max":
                skipped = measures.overflow_skipped_count(steps, warmup_steps)
                evidence["overflow_skipped_steps_excluded(steps)"] = "not recorded" if skipped is None else skipped
            if metric.startswith("memory/") and gate.get("ranks", "smallest_device") == "smallest_device":
                ranks, why = smallest_device_ranks(steps, fingerprint)
                pool = pool[pool["rank"].isin(ranks)]
                evidence["device_selection"] = why
                if "memory/device_peak_source" in steps.columns:
                    evidence["memory_source"] = sorted(steps["memory/device_peak_source"].dropna().unique().tolist())
            if not len(pool):
                raise NotMeasured(f"no '{metric}' values after warm-up")
            require_values(pool, metric)
            value, more = slowest_rank_evidence(pool, metric, statistic)
            evidence.update(more)
            if unit_of(metric) != f"({gate['unit']})":  # the per-rank values in the gate's unit too
                evidence[f"per_rank({gate['unit']})"] = {rank: _in_unit(v, metric, gate["unit"])
                                                         for rank, v in more[f"per_rank{unit_of(metric)}"].items()}
            if statistic == "median" and "step_time" in metric:
                evidence[f"p90{unit_of(metric)}"] = measures.slowest_rank(pool, metric, "p90").value
            measured = _in_unit(value, metric, gate["unit"])
        elif statistic == "loss_convergence":
            measured, problems, evidence = loss_convergence(steps, gate, spike_rule)
            extra_failures.extend(problems)
        elif statistic == "floor_ratio":
            measured, evidence = floor_ratio(steps, gate["metric"], warmup_steps, plan)
            if measured < 1:  # never clipped: a floor above the measurement is reported as the bug it is
                extra_failures.append(FLOOR_ABOVE_MEASUREMENT.format(floor=evidence["floor(s)"],
                                                                     measured=measured * evidence["floor(s)"]))
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
            measured, problems, evidence = nonfinite(steps, events, completion, gate["metric"].split(","))
            evidence["records"] = records.evidence()
            extra_failures.extend(problems)
        else:  # the schema admits no other statistic
            raise ValueError(f"unknown statistic {statistic}")
    except NotMeasured as reason:
        result.update(measured=None, verdict=NOT_MEASURED, reason=str(reason), evidence={})
        return result
    finite = measured is not None and math.isfinite(measured)
    passed = finite and COMPARE[gate["comparison"]](measured, gate["threshold"])
    reasons = [] if passed or not finite else [
        f"measured {measured:.4g} {gate['unit']} is not {gate['comparison']} {gate['threshold']:g}"]
    if not finite and not extra_failures:
        reasons.append("the measured value is not a finite number")
    reasons += extra_failures
    result.update(measured=measured if finite else None, verdict=PASS if passed and not extra_failures else FAIL,
                  reason="; ".join(reasons), evidence=evidence)
    return result


CLAIM_DEVICES = ("5070", "4090")  # claim.md section 4: RTX 5070 8 GB + RTX 4090 24 GB


def faithfulness(deviations: list[dict[str, Any]], fingerprint: dict[str, Any]) -> dict[str, Any]:
    """Whether the run reproduces the claim as published: its config unchanged and its hardware."""
    reasons = [f"{d['path']}: {d['claim']!r} -> {d['rendered']!r} ({d['reason']})"
               for d in deviations if d["changes_experiment"]]
    names = [d["name"] for d in fingerprint["accelerator"]["devices"]]
    same_hardware = len(names) == 2 and all(any(tag in n for n in names) for tag in CLAIM_DEVICES)
    if not same_hardware:
        reasons.append(f"hardware differs from the claim's RTX 5070 + RTX 4090: "
                       f"{', '.join(names) if names else 'no GPU (CPU accelerator)'}")
    return {"faithful": not reasons, "reasons": reasons}


def evaluate(gates: list[dict[str, Any]], steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None,
             run_spec: dict[str, Any], deviations: list[dict[str, Any]], fingerprint: dict[str, Any],
             warmup_steps: int, spike_rule: SpikeRule, plan: dict[str, Any] | None = None,
             run_meta: dict[str, Any] | None = None, ds_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """All gates of the profile. ``warmup_steps`` is the profile's ``training.warmup_steps_excluded`` and
    ``spike_rule`` its ``stabiliser`` settings (both analysis inputs: changing them re-judges). The world
    size is the run spec's (``world_size``). ``plan`` (the planner's plan.json), ``run_meta`` (parse_logs'
    run.json) and ``ds_config`` (the rendered DeepSpeed config) are optional: the gates that need them
    are NOT MEASURED without them."""
    expected = run_spec["training"]["optimizer_steps"]
    world_size = run_spec.get("world_size") or world_size_of(summary, run_meta)
    results = [evaluate_gate(g, steps, events, summary, fingerprint, warmup_steps, expected, spike_rule, plan, run_meta,
                             world_size=world_size, ds_config=ds_config)
               for g in gates]
    counts = {v: sum(r["verdict"] == v for r in results) for v in (PASS, FAIL, NOT_MEASURED)}
    return {"gates": results, "counts": counts, "reproduction": faithfulness(deviations, fingerprint)}


def failed_gates(verdicts: dict[str, Any]) -> list[str]:
    """The gates that FAIL, each as 'name: reason' (for the strict option)."""
    return [f"{g['name']}: {g['reason']}" for g in verdicts["gates"] if g["verdict"] == FAIL]
