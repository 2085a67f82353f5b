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

import numpy as np
import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.measures import Completion, SpikeRule, smooth
from zerogate.analysis.parse import event_table, run_metadata
from zerogate.units import GB, GIB

PASS, FAIL, NOT_MEASURED = "PASS", "FAIL", "NOT MEASURED"
TREND_ALPHA = 0.01  # one-sided significance of the downward loss trend
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
    return result.value, {f"per_rank{unit_of(metric)}": result.per_rank, "worst_rank": result.rank}


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


def spearman_downward(values: np.ndarray) -> tuple[float, float]:
    """Spearman rho of values against step, and the one-sided p-value of rho < 0 (Fisher z with the
    Fieller-Hartley-Pearson variance 1.06 / (n - 3); adequate for n >= 10)."""
    n = len(values)
    if n < 10:
        return float("nan"), float("nan")
    ranks_x = np.arange(n, dtype=float)
    ranks_y = pd.Series(values).rank().to_numpy()
    rho = float(np.corrcoef(ranks_x, ranks_y)[0, 1])
    rho_clipped = min(max(rho, -0.999999), 0.999999)
    z = math.atanh(rho_clipped) * math.sqrt((n - 3) / 1.06)
    p_downward = 0.5 * math.erfc(-z / math.sqrt(2))  # P(Z <= z)
    return rho, p_downward


def loss_convergence(steps: pd.DataFrame, gate: dict[str, Any], spike_rule: SpikeRule) -> tuple[float, bool, dict[str, Any]]:
    """(final/initial ratio of the smoothed loss, whether the trend is significantly downward, evidence)."""
    _column(steps, "loss")
    loss = measures.loss_series(steps)
    finite = loss[np.isfinite(loss)]
    if len(finite) < 10:
        raise NotMeasured(f"only {len(finite)} finite loss values (need 10)")
    smoothed = smooth(finite.reset_index(drop=True))
    tenth = max(1, len(smoothed) // 10)
    initial, final = float(smoothed.iloc[:tenth].mean()), float(smoothed.iloc[-tenth:].mean())
    rho, p = spearman_downward(finite.to_numpy())
    spikes = measures.loss_spikes(steps, spike_rule)
    evidence = {
        "initial_smoothed_loss": initial,
        "final_smoothed_loss": final,
        "spearman_rho": rho,
        "p_downward": p,
        "alpha": TREND_ALPHA,
        "spikes": spikes.count,
        "spike_steps": spikes.steps,
        "spike_rule": spike_rule.describe(),
        "steps": int(len(finite)),
    }
    return final / initial, bool(rho < 0 and p < TREND_ALPHA), evidence


def nonfinite(steps: pd.DataFrame, events: pd.DataFrame, completion: Completion,
              metrics: list[str]) -> tuple[float, list[str], dict[str, Any]]:
    """(count of non-finite values and fatal events, problems that fail the gate outright, evidence)."""
    present = [m for m in metrics if m in steps.columns]
    if not present:
        raise NotMeasured(f"none of {metrics} in the run's step records")
    counts = {}
    shown: set[int] = set()  # steps whose records show a non-finite value
    for metric in present:
        values = pd.to_numeric(steps[metric], errors="coerce").astype(float)
        # A null grad_norm means DeepSpeed returned none; a null loss was a non-finite value.
        bad = ~np.isfinite(values) if metric == "loss" else (values.notna() & ~np.isfinite(values))
        counts[metric] = int(bad.sum())
        shown |= {int(step) for step in steps.loc[bad, "step"]}
    fatal = int((events["kind"] == "fatal_loss_scale").sum()) if len(events) else 0
    # A non-finite value the loss stabiliser caught counts even where the step records no longer show it:
    # a rollback restores the metrics of the last good checkpoint, so the bad step's record is gone.
    caught = stabiliser_nonfinite(events)
    unseen = sorted({step for step in caught if step not in shown})
    # The run must also have completed: the one completion definition the ranks_completed gate reads.
    ranks = sorted(int(r) for r in steps["rank"].unique())
    evidence = {"per_metric": counts, "fatal_loss_scale_events": fatal, "ranks": ranks,
                "steps_per_rank": completion.steps_per_rank, "run_complete": completion.complete,
                "stabiliser_nonfinite_steps": sorted(set(caught)), "stabiliser_only_steps": unseen}
    return float(sum(counts.values()) + fatal + len(unseen)), list(completion.problems), evidence


def stabiliser_nonfinite(events: pd.DataFrame) -> list[int]:
    """Steps at which the loss stabiliser caught a non-finite loss or gradient norm (any rank, any action)."""
    rows = event_table(events, "stabiliser")
    if not len(rows):
        return []
    return [int(step) for step, kind in zip(rows["step"], rows["kind"]) if str(kind).startswith("nonfinite")]


def _in_unit(value: float, metric: str, unit: str) -> float:
    """Convert a measured value to the gate's unit (memory is logged in GiB)."""
    if "(GiB)" in metric and unit == "GB":
        return value * GIB / GB
    return value


def floor_ratio(steps: pd.DataFrame, metric: str, warmup_steps: int,
                plan: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    """Median optimizer-step time (slowest rank) over the planner's physical floor for this machine."""
    floor = physical_floor_seconds(plan)
    if floor is None:
        raise NotMeasured("no physical floor: the planner's plan.json is absent or gives none")
    if floor <= 0:
        raise NotMeasured(f"the planner's floor is {floor} s, not a positive time")
    _column(steps, metric)
    median, evidence = slowest_rank_evidence(measures.timed_steps(steps, warmup_steps), metric, "median")
    evidence.update({f"median_step_time{unit_of(metric)}": median, "floor(s)": floor,
                     "warmup_steps_excluded": warmup_steps})
    return median / floor, evidence


def overflow_skip_fraction(steps: pd.DataFrame, run_meta: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    """Fraction of optimizer steps that fp16 skipped (worst rank), from the step records' skip reasons
    (measures.overflow_skips). DeepSpeed's own ``skipped=`` count from its last progress line is shown
    beside it as evidence only: it also counts the updates the loss stabiliser dropped."""
    skips = measures.overflow_skips(steps)
    if skips is None:
        raise NotMeasured("the run had no fp16 loss scaler (loss_scale not recorded): nothing for it to skip")
    evidence: dict[str, Any] = {"source": "per-step records (skip_reason)", "skip_fraction_per_rank": skips.fraction_per_rank,
                                "skipped_per_rank": skips.per_rank}
    progress = (run_meta or {}).get("deepspeed_skipped_steps")
    if progress:
        evidence["deepspeed_progress_line"] = {**progress, "note": "DeepSpeed's count also includes the updates "
                                                                   "the loss stabiliser dropped; not the statistic"}
    return skips.worst_fraction, evidence


def failed_ranks(completion: Completion) -> tuple[float, dict[str, Any]]:
    """Ranks that crashed, exited non-zero or stopped before the last step (measures.run_completion),
    with their last log lines."""
    evidence = {"failures": completion.failures, "stopped_early": completion.stopped_early,
                "finished": completion.finished, "failed_ranks": completion.failed_ranks,
                "steps_per_rank": completion.steps_per_rank}
    return float(completion.failed_rank_count), evidence


def completion_for(steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None, expected_steps: int,
                   run_meta: dict[str, Any] | None) -> Completion:
    """The run's completion from parse_logs' metadata, or, without it, from the same parse over the step
    records and events (no launcher log text: the failures then lack their last lines)."""
    if run_meta is None:
        run_meta = run_metadata(steps, events, summary, "", expected_steps)
    return measures.completion_of(run_meta)


def evaluate_gate(gate: dict[str, Any], steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None,
                  fingerprint: dict[str, Any], warmup_steps: int, expected_steps: int, spike_rule: SpikeRule,
                  plan: dict[str, Any] | None = None, run_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    result = {key: gate[key] for key in ("name", "claim", "definition", "metric", "statistic", "comparison",
                                         "threshold", "unit")}
    extra_failures: list[str] = []
    try:
        statistic = gate["statistic"]
        if statistic in ("median", "p90", "max"):
            metric = gate["metric"]
            _column(steps, metric)
            pool = measures.timed_steps(steps, warmup_steps) if statistic != "max" else steps
            evidence: dict[str, Any] = {"warmup_steps_excluded": warmup_steps if statistic != "max" else 0}
            if statistic != "max":
                skipped = measures.overflow_skipped_count(steps, warmup_steps)
                evidence["overflow_skipped_steps_excluded"] = "not recorded" if skipped is None else skipped
            if metric.startswith("memory/") and gate.get("ranks", "smallest_device") == "smallest_device":
                ranks, why = smallest_device_ranks(steps, fingerprint)
                pool = pool[pool["rank"].isin(ranks)]
                evidence["device_selection"] = why
                if "memory/device_peak_source" in steps.columns:
                    evidence["memory_source"] = sorted(steps["memory/device_peak_source"].dropna().unique().tolist())
            if pool[metric].isna().all():
                raise NotMeasured(f"no '{metric}' values after warm-up")
            value, more = slowest_rank_evidence(pool, metric, statistic)
            evidence.update(more)
            if statistic == "median" and "step_time" in metric:
                evidence[f"p90{unit_of(metric)}"] = measures.slowest_rank(pool, metric, "p90").value
            measured = _in_unit(value, metric, gate["unit"])
        elif statistic == "smoothed_final_over_initial":
            measured, downward, evidence = loss_convergence(steps, gate, spike_rule)
            if not downward:
                extra_failures.append(
                    f"no significant downward trend (rho {evidence['spearman_rho']:.3f}, p {evidence['p_downward']:.3g})"
                )
        elif statistic == "floor_ratio":
            measured, evidence = floor_ratio(steps, gate["metric"], warmup_steps, plan)
        elif statistic == "overflow_skip_fraction":
            measured, evidence = overflow_skip_fraction(steps, run_meta)
        elif statistic == "failed_ranks":
            if run_meta is None:
                raise NotMeasured("no run metadata (parse_logs output) to read rank failures from")
            completion = completion_for(steps, events, summary, expected_steps, run_meta)
            measured, evidence = failed_ranks(completion)
            extra_failures.extend(completion.problems)
        elif statistic == "nonfinite_count":
            completion = completion_for(steps, events, summary, expected_steps, run_meta)
            measured, problems, evidence = nonfinite(steps, events, completion, gate["metric"].split(","))
            extra_failures.extend(problems)
        else:  # the schema admits no other statistic
            raise ValueError(f"unknown statistic {statistic}")
    except NotMeasured as reason:
        result.update(measured=None, verdict=NOT_MEASURED, reason=str(reason), evidence={})
        return result
    passed = math.isfinite(measured) and COMPARE[gate["comparison"]](measured, gate["threshold"])
    reasons = [] if passed else [f"measured {measured:.4g} {gate['unit']} is not {gate['comparison']} {gate['threshold']:g}"]
    reasons += extra_failures
    result.update(measured=measured, verdict=PASS if passed and not extra_failures else FAIL,
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
             run_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """All gates of the profile. ``warmup_steps`` is the profile's ``training.warmup_steps_excluded`` and
    ``spike_rule`` its ``stabiliser`` settings (both analysis inputs: changing them re-judges). ``plan``
    (the planner's plan.json) and ``run_meta`` (parse_logs' run.json) are optional: the gates that need
    them are NOT MEASURED without them."""
    expected = run_spec["training"]["optimizer_steps"]
    results = [evaluate_gate(g, steps, events, summary, fingerprint, warmup_steps, expected, spike_rule, plan, run_meta)
               for g in gates]
    counts = {v: sum(r["verdict"] == v for r in results) for v in (PASS, FAIL, NOT_MEASURED)}
    return {"gates": results, "counts": counts, "reproduction": faithfulness(deviations, fingerprint)}


def failed_gates(verdicts: dict[str, Any]) -> list[str]:
    """The gates that FAIL, each as 'name: reason' (for the strict option)."""
    return [f"{g['name']}: {g['reason']}" for g in verdicts["gates"] if g["verdict"] == FAIL]
