"""Judge the run against the profile's gates: each gate a record with its definition, the measured
value, the threshold and a verdict. A metric that was not measured is NOT MEASURED, never PASS.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any, Callable

import numpy as np
import pandas as pd

from zerogate.analysis.parse import event_table
from zerogate.units import GB, GIB

PASS, FAIL, NOT_MEASURED = "PASS", "FAIL", "NOT MEASURED"
TREND_ALPHA = 0.01  # one-sided significance of the downward loss trend
SPIKE_WINDOW, SPIKE_Z = 128, 6.0  # reference.md section 4
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, ">=": operator.ge, ">": operator.gt,
}


class NotMeasured(Exception):
    """The gate's metric is missing from the run's records."""


def _column(steps: pd.DataFrame, metric: str) -> pd.DataFrame:
    if metric not in steps.columns or steps[metric].isna().all():
        raise NotMeasured(f"no '{metric}' values in the run's step records")
    return steps


def timed_steps(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """Steps that count for timing: warm-up and fp16-overflow-skipped steps excluded (a skipped step
    does no optimizer update, so it would flatter the step time)."""
    kept = steps["step"] > warmup_steps
    if "overflow_skipped" in steps.columns:
        kept &= ~steps["overflow_skipped"].fillna(False).astype(bool)
    return steps[kept]


def skipped_count(steps: pd.DataFrame, warmup_steps: int) -> int | None:
    """Overflow-skipped steps after warm-up (slowest rank's count), None when the records do not say."""
    if "overflow_skipped" not in steps.columns:
        return None
    after = steps[steps["step"] > warmup_steps]
    return int(after["overflow_skipped"].fillna(False).astype(bool).groupby(after["rank"]).sum().max())


def physical_floor_seconds(plan: dict[str, Any] | None) -> float | None:
    """The planner's lower bound on one optimizer step on this machine (plan.json, issue 3).

    Read from ``plan["floor"]["optimizer_step(s)"]`` (or a top-level ``"optimizer_step_floor(s)"``);
    None when there is no plan or it gives no floor.
    """
    if not plan:
        return None
    value = (plan.get("floor") or {}).get("optimizer_step(s)", plan.get("optimizer_step_floor(s)"))
    return float(value) if value is not None else None


def per_rank_worst(steps: pd.DataFrame, metric: str, statistic: str) -> tuple[float, dict[str, Any]]:
    """The statistic per rank, then the worst (largest) rank: the slowest rank sets the pace."""
    reducers = {"median": lambda s: s.median(), "p90": lambda s: s.quantile(0.9), "max": lambda s: s.max()}
    per_rank = steps.groupby("rank")[metric].agg(reducers[statistic])
    worst_rank = int(per_rank.idxmax())
    return float(per_rank.max()), {"per_rank": {int(r): float(v) for r, v in per_rank.items()}, "worst_rank": worst_rank}


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


def smooth(series: pd.Series) -> pd.Series:
    """Centred rolling median, window ~5 % of the run (at least 5 steps)."""
    window = max(5, len(series) // 20) | 1
    return series.rolling(window, center=True, min_periods=1).median()


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


def count_spikes(values: np.ndarray) -> int:
    """Steps whose loss sits more than SPIKE_Z robust standard deviations above the trailing window."""
    series = pd.Series(values)
    median = series.rolling(SPIKE_WINDOW, min_periods=10).median().shift(1)
    mad = (series - median).abs().rolling(SPIKE_WINDOW, min_periods=10).median().shift(1)
    z = (series - median) / (1.4826 * mad.replace(0, np.nan))
    return int((z > SPIKE_Z).sum())


def loss_convergence(steps: pd.DataFrame, gate: dict[str, Any]) -> tuple[float, bool, dict[str, Any]]:
    """(final/initial ratio of the smoothed loss, whether the trend is significantly downward, evidence)."""
    _column(steps, "loss")
    # The logged loss is all-reduced, so every rank holds the same series: take the lowest rank.
    first_rank = steps["rank"].min()
    loss = steps[steps["rank"] == first_rank].sort_values("step")["loss"].astype(float)
    finite = loss[np.isfinite(loss)]
    if len(finite) < 10:
        raise NotMeasured(f"only {len(finite)} finite loss values (need 10)")
    smoothed = smooth(finite.reset_index(drop=True))
    tenth = max(1, len(smoothed) // 10)
    initial, final = float(smoothed.iloc[:tenth].mean()), float(smoothed.iloc[-tenth:].mean())
    rho, p = spearman_downward(finite.to_numpy())
    evidence = {
        "initial_smoothed_loss": initial,
        "final_smoothed_loss": final,
        "spearman_rho": rho,
        "p_downward": p,
        "alpha": TREND_ALPHA,
        "spikes": count_spikes(finite.to_numpy()),
        "spike_rule": f"robust z > {SPIKE_Z} against the trailing {SPIKE_WINDOW} steps",
        "steps": int(len(finite)),
    }
    return final / initial, bool(rho < 0 and p < TREND_ALPHA), evidence


def nonfinite(steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None, expected_steps: int,
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
    problems = []
    ranks = sorted(int(r) for r in steps["rank"].unique())
    completed = {int(r): int(g["step"].max()) for r, g in steps.groupby("rank")}
    incomplete = {r: s for r, s in completed.items() if s < expected_steps}
    if summary is None:
        problems.append("the training run did not finish (no summary)")
    if incomplete:
        problems.append(f"ranks stopped early: {incomplete} of {expected_steps} steps")
    crashed = events[events["kind"].isin(["traceback", "rank_exit_error"])] if len(events) else events
    if len(crashed):
        first = crashed.iloc[0]
        problems.append(f"rank {first['rank']} failed: {first['message']}")
    evidence = {"per_metric": counts, "fatal_loss_scale_events": fatal, "ranks": ranks, "steps_per_rank": completed,
                "stabiliser_nonfinite_steps": sorted(set(caught)), "stabiliser_only_steps": unseen}
    return float(sum(counts.values()) + fatal + len(unseen)), problems, evidence


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
    median, evidence = per_rank_worst(timed_steps(steps, warmup_steps), metric, "median")
    evidence.update({"median_step_time(s)": median, "floor(s)": floor})
    return median / floor, evidence


def overflow_skip_fraction(steps: pd.DataFrame, events: pd.DataFrame, warmup_steps: int) -> tuple[float, dict[str, Any]]:
    """Fraction of optimizer steps that fp16 skipped: from the per-step records, else from DeepSpeed's
    cumulative ``skipped=`` count on its last progress line."""
    if "overflow_skipped" in steps.columns:
        flags = steps["overflow_skipped"].fillna(False).astype(bool)
        per_rank = flags.groupby(steps["rank"]).mean()
        return float(per_rank.max()), {"source": "per-step records", "per_rank": {int(r): float(v) for r, v in per_rank.items()},
                                       "skipped_per_rank": {int(r): int(v) for r, v in flags.groupby(steps["rank"]).sum().items()}}
    progress = events[events["kind"] == "ds_progress"] if len(events) else events
    if len(progress):
        last = progress.iloc[-1]
        skipped = json.loads(last["detail"])["skipped"]
        return float(skipped) / int(last["step"]), {"source": "DeepSpeed progress line", "skipped": skipped,
                                                     "at_step": int(last["step"])}
    if "loss_scale" in steps.columns and steps["loss_scale"].isna().all():
        raise NotMeasured("the run had no fp16 loss scaler (loss_scale not recorded): nothing for it to skip")
    raise NotMeasured("neither the step records nor the launcher log say which steps fp16 skipped")


def failed_ranks(run_meta: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    """Ranks that crashed, exited non-zero or stopped before the last step, with their last log lines."""
    if run_meta is None:
        raise NotMeasured("no run metadata (parse_logs output) to read rank failures from")
    expected = run_meta.get("expected_steps")
    # JSON keys are strings once run.json has been written and read back.
    short = {int(r): s for r, s in run_meta["steps_completed_per_rank"].items() if expected and s < expected}
    failed = set(run_meta["failed_ranks"]) | set(short)
    evidence = {"failures": run_meta["failures"], "stopped_early": short, "finished": run_meta["finished"]}
    if not run_meta["finished"] and not failed:
        failed = {-1}  # the run stopped without saying which rank: count it once
    return float(len(failed)), evidence


def evaluate_gate(gate: dict[str, Any], steps: pd.DataFrame, events: pd.DataFrame, summary: dict[str, Any] | None,
                  fingerprint: dict[str, Any], warmup_steps: int, expected_steps: int,
                  plan: dict[str, Any] | None = None, run_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    result = {key: gate[key] for key in ("name", "claim", "definition", "metric", "statistic", "comparison",
                                         "threshold", "unit")}
    extra_failures: list[str] = []
    try:
        statistic = gate["statistic"]
        if statistic in ("median", "p90", "max"):
            metric = gate["metric"]
            _column(steps, metric)
            pool = timed_steps(steps, warmup_steps) if statistic != "max" else steps
            evidence: dict[str, Any] = {"warmup_steps_excluded": warmup_steps if statistic != "max" else 0}
            if statistic != "max":
                skipped = skipped_count(steps, warmup_steps)
                evidence["overflow_skipped_steps_excluded"] = "not recorded" if skipped is None else skipped
            if metric.startswith("memory/") and gate.get("ranks", "smallest_device") == "smallest_device":
                ranks, why = smallest_device_ranks(steps, fingerprint)
                pool = pool[pool["rank"].isin(ranks)]
                evidence["device_selection"] = why
                if "memory/device_peak_source" in steps.columns:
                    evidence["memory_source"] = sorted(steps["memory/device_peak_source"].dropna().unique().tolist())
            if pool[metric].isna().all():
                raise NotMeasured(f"no '{metric}' values after warm-up")
            value, more = per_rank_worst(pool, metric, statistic)
            evidence.update(more)
            if statistic == "median" and "step_time" in metric:
                evidence["p90"] = float(pool.groupby("rank")[metric].quantile(0.9).max())
            measured = _in_unit(value, metric, gate["unit"])
        elif statistic == "smoothed_final_over_initial":
            measured, downward, evidence = loss_convergence(steps, gate)
            if not downward:
                extra_failures.append(
                    f"no significant downward trend (rho {evidence['spearman_rho']:.3f}, p {evidence['p_downward']:.3g})"
                )
        elif statistic == "floor_ratio":
            measured, evidence = floor_ratio(steps, gate["metric"], warmup_steps, plan)
        elif statistic == "overflow_skip_fraction":
            measured, evidence = overflow_skip_fraction(steps, events, warmup_steps)
        elif statistic == "failed_ranks":
            measured, evidence = failed_ranks(run_meta)
            if evidence["failures"]:
                first = evidence["failures"][0]
                extra_failures.append(f"rank {first['rank']} failed: {first['message']}")
        elif statistic == "nonfinite_count":
            measured, problems, evidence = nonfinite(steps, events, summary, expected_steps, gate["metric"].split(","))
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
             warmup_steps: int, plan: dict[str, Any] | None = None,
             run_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """All gates of the profile. ``plan`` (the planner's plan.json) and ``run_meta`` (parse_logs'
    run.json) are optional: the gates that need them are NOT MEASURED without them."""
    expected = run_spec["training"]["optimizer_steps"]
    results = [evaluate_gate(g, steps, events, summary, fingerprint, warmup_steps, expected, plan, run_meta)
               for g in gates]
    counts = {v: sum(r["verdict"] == v for r in results) for v in (PASS, FAIL, NOT_MEASURED)}
    return {"gates": results, "counts": counts, "reproduction": faithfulness(deviations, fingerprint)}


def failed_gates(verdicts: dict[str, Any]) -> list[str]:
    """The gates that FAIL, each as 'name: reason' (for the strict option)."""
    return [f"{g['name']}: {g['reason']}" for g in verdicts["gates"] if g["verdict"] == FAIL]
