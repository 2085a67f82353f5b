"""The profile's gates as one launcher log can judge them (the judge_log rule). A log supports four: the
fp16 overflow fraction, the absence of fatal loss-scale aborts, the ranks that failed, and the step time
where throughput lines give it. Every other gate is NOT MEASURED with the reason a log cannot give it.

Each judged gate keeps the profile gate's name, claim, comparison and threshold; its definition says
what the log's lines measure (not the profile's definition, which reads zerogate's per-step records).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.failure_attribution import attribute_events
from zerogate.analysis.gate_measures import NotMeasured, unit_of
from zerogate.analysis.gates import COMPARE
from zerogate.analysis.log_input import read_log_text
from zerogate.analysis.log_summary import BF16, FP16, FP32, config_value, failures, log_counts
from zerogate.analysis.parse import parse_launcher_log
from zerogate.config.judging import GateSettings
from zerogate.contracts.log_summary import ExitError, LogGate, LogSummary, RankFailure
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS

STEP_TIME_DEFINITION = (
    "Optimizer-step time from DeepSpeed's throughput lines, {statistic} over the lines after the warm-up "
    "steps: "
    "the pipeline engine's 'iter time (s)' (a mean over steps_per_print steps), or train_batch_size (from "
    "DeepSpeed's config print) over 'CurrSamplesPerSec' (one step: the first micro-step's forward to the "
    "optimizer step){per_micro}. Rank 0's timer only, not the slowest rank."
)
OVERFLOW_DEFINITION = (
    "Optimizer steps the fp16 loss scaler skipped, as the log's overflow lines show them (one per step "
    "however "
    "many ranks report it), over the highest optimizer step a progress or throughput line names; NOT "
    "MEASURED "
    "when the log shows bf16 or fp32 training, or does not say whether fp16 loss scaling was on."
)
FATAL_DEFINITION = (
    "Fatal loss-scale aborts ('Current loss scale already at minimum - cannot decrease scale anymore') in "
    "the "
    "log: the part of {gate} a launcher log can show (non-finite losses and gradient norms are in zerogate's "
    "per-step records, not in a launcher log)."
)
FAILED_RANKS_DEFINITION = (
    "Ranks that failed, as zerogate.analysis.failure_attribution defines it: a rank with a traceback of its "
    "own (under its [rankN]: prefix, or without one in a log of one process), an exit a launcher or "
    "scheduler reports for it (DeepSpeed's launcher, torch's elastic agent and its ChildFailedError "
    "summary, CalledProcessError, Slurm), a watchdog failure (an NCCL timeout, a watchdog that got stuck "
    "or signalled), a kill of the only process, or an abort it printed; failures that name no rank count "
    "as one rank, and a launcher's traceback is no failure of its own. With no failure line, PASS needs "
    "the launcher's 'exits successfully' lines; whether every rank reached the last step is not in a log."
)
NOT_IN_A_LOG = {
    "loss_convergence": "a launcher log holds no per-step loss (the pipeline engine prints a mean over "
    "steps_per_print steps, DeepSpeed's other lines none)",
    "floor_ratio": "the physical floor is planned for a machine zerogate probed or was given; a log does not "
    "say which machine, links and bandwidths it ran on",
    "max": "DeepSpeed's memory lines give rank 0's allocator at the moments it printed them (MA/Max_MA, "
    "CA/Max_CA "
    "in GiB), not each rank's device peak this gate defines",
    "nonfinite_count": "a launcher log holds no per-step loss or gradient norm; the fatal loss-scale aborts "
    "it "
    "can show are judged as {fatal}",
}


def _record(
    gate: GateSettings,
    definition: str,
    measured: float | None,
    reason: str = "",
    evidence: dict[str, Any] | None = None,
    *,
    name: str | None = None,
) -> LogGate:
    """A judged gate: NOT MEASURED without a value, else the profile gate's comparison on ``measured``."""
    fields = {
        k: getattr(gate, k) for k in ("claim", "metric", "statistic", "comparison", "threshold", "unit")
    }
    if measured is None:
        return LogGate(
            name=name or gate.name,
            definition=definition,
            measured=None,
            verdict=NOT_MEASURED,
            reason=reason,
            evidence=evidence or {},
            **fields,
        )
    passed = math.isfinite(measured) and COMPARE[gate.comparison](measured, gate.threshold)
    why = (
        [] if passed else [f"measured {measured:.4g} {gate.unit} is not {gate.comparison} {gate.threshold:g}"]
    )
    return LogGate(
        name=name or gate.name,
        definition=definition,
        measured=measured,
        verdict=PASS if passed else FAIL,
        reason="; ".join(why + ([reason] if reason else [])),
        evidence=evidence or {},
        **fields,
    )


def overflow_fraction(counts: dict[str, Any], events: pd.DataFrame) -> tuple[float, dict[str, Any]]:
    """(skipped steps / highest optimizer step, evidence); NotMeasured without a loss scaler or a step
    count."""
    if counts["precision"] in (BF16, FP32):
        raise NotMeasured(f"the log shows {counts['precision']} training: no fp16 loss scaler to skip steps")
    if counts["precision"] != FP16:
        raise NotMeasured(
            "the log does not say whether fp16 loss scaling was on (no overflow line, no DeepSpeed "
            "config print of fp16_enabled)"
        )
    if not counts["optimizer_steps"]:
        raise NotMeasured("no progress or throughput line names an optimizer step: nothing to divide by")
    evidence: dict[str, Any] = {
        "skipped_steps(steps)": counts["skipped_steps"],
        "hysteresis_skips(steps)": counts["hysteresis_skips"],
        "optimizer_steps(steps)": counts["optimizer_steps"],
    }
    if counts["progress_skipped"] is not None:
        evidence["deepspeed_progress_skipped(steps)"] = counts["progress_skipped"]
    return counts["skipped_steps"] / counts["optimizer_steps"], evidence


def failed_rank_count(counts: dict[str, Any], events: pd.DataFrame) -> tuple[float, dict[str, Any]]:
    """(failed ranks, evidence): the attribution's failed ranks, one for failures that name none;
    NotMeasured when the log shows neither a failure nor a successful exit."""
    attribution = attribute_events(events)
    lines = attribution.lines()
    exits_ok = int((events["kind"] == "rank_exit_ok").sum())
    if not lines and not exits_ok:
        raise NotMeasured(
            "no failure line and no 'exits successfully' line: the log does not show how the ranks ended"
        )
    evidence = {
        "failed_ranks(rank)": counts["failed_ranks"],
        "failures_naming_no_rank(count)": len(attribution.unnamed.lines) if attribution.unnamed else 0,
        "exit_errors": counts["exit_errors"],
        "successful_exits(count)": exits_ok,
        "world_size(ranks)": counts["world_size"],
        "failures": [
            {"kind": f.kind, "rank(rank)": f.rank, "line(line)": f.line, "message": f.message} for f in lines
        ][:20],
    }
    return float(attribution.rank_count), evidence


def step_times(events: pd.DataFrame, warmup_steps: int) -> tuple[list[float], str]:
    """Optimizer-step times (s) from the throughput lines after the warm-up, and where they came from;
    NotMeasured with the reason when the lines give none."""
    rows = events[events["kind"] == "throughput"]
    if not len(rows):
        raise NotMeasured("no DeepSpeed throughput line in the log")
    batch = config_value(events, "train_batch_size")
    times, sources = [], set()
    for step, detail in zip(rows["step"], rows["detail"]):
        fields = json.loads(detail)
        if not pd.isna(step) and step <= warmup_steps:
            continue
        if "iter_time_s" in fields:
            times.append(fields["iter_time_s"])
            sources.add("the pipeline engine's iter time")
        elif fields.get("samples_per_s") and batch and "timer_count" not in fields:
            times.append(float(batch) / fields["samples_per_s"])
            sources.add("train_batch_size / CurrSamplesPerSec")
    if times:
        return times, " and ".join(sorted(sources))
    if batch is None:
        raise NotMeasured(
            "the throughput lines give samples/s, and the log does not state train_batch_size "
            "(DeepSpeed's config print) to turn them into a step time"
        )
    raise NotMeasured(
        f"no throughput line after the {warmup_steps} warm-up steps gives one step's time (DeepSpeed "
        "before 0.8 prints a running average, or a current rate over a timer count that may be "
        "micro-steps)"
    )


def step_time_statistic(
    gate: GateSettings, events: pd.DataFrame, warmup_steps: int
) -> tuple[float, dict[str, Any]]:
    times, source = step_times(events, warmup_steps)
    if gate.metric.startswith("micro_step_time"):
        accumulation = config_value(events, "gradient_accumulation_steps")
        if not accumulation:
            raise NotMeasured(
                "the log does not state gradient_accumulation_steps (DeepSpeed's config print) to "
                "divide the step time by"
            )
        times = [t / float(accumulation) for t in times]
    value = measures.STATISTICS[gate.statistic](pd.Series(times, dtype=float))
    return value, {
        f"values{unit_of(gate.metric)}": times,
        "lines(count)": len(times),
        "source": source,
        "warmup_steps_excluded(steps)": warmup_steps,
    }


def judge_gate(
    gate: GateSettings, counts: dict[str, Any], events: pd.DataFrame, warmup_steps: int
) -> list[LogGate]:
    """One profile gate as the log judges it (two records for the non-finite gate: the fatal-abort part the
    log shows, and the rest NOT MEASURED)."""
    statistic = gate.statistic
    fatal_name = f"{gate.name}_fatal_loss_scale_aborts"
    if statistic == "nonfinite_count":
        fatal = _record(
            gate,
            FATAL_DEFINITION.format(gate=gate.name),
            float(counts["fatal_loss_scale"]),
            evidence={"fatal_loss_scale(count)": counts["fatal_loss_scale"]},
            name=fatal_name,
        )
        rest = _record(gate, gate.definition, None, NOT_IN_A_LOG[statistic].format(fatal=fatal_name))
        return [fatal, rest]
    judged: dict[str, tuple[str, Callable[[], tuple[float, dict[str, Any]]]]] = {
        "overflow_skip_fraction": (OVERFLOW_DEFINITION, lambda: overflow_fraction(counts, events)),
        "failed_ranks": (FAILED_RANKS_DEFINITION, lambda: failed_rank_count(counts, events)),
    }
    if statistic in ("median", "p90") and "step_time" in gate.metric:
        per_micro = (
            ", divided by gradient_accumulation_steps (config print)"
            if gate.metric.startswith("micro_step_time")
            else ""
        )
        judged[statistic] = (
            STEP_TIME_DEFINITION.format(statistic=statistic, per_micro=per_micro),
            lambda: step_time_statistic(gate, events, warmup_steps),
        )
    if statistic not in judged:
        reason = NOT_IN_A_LOG.get(
            statistic, f"zerogate cannot read statistic '{statistic}' of '{gate.metric}' from a launcher log"
        )
        return [_record(gate, gate.definition, None, reason)]
    definition, measure = judged[statistic]
    try:
        measured, evidence = measure()
    except NotMeasured as why:
        return [_record(gate, definition, None, str(why))]
    return [_record(gate, definition, measured, evidence=evidence)]


def judge_log_gates(
    gates: tuple[GateSettings, ...] | list[GateSettings],
    counts: dict[str, Any],
    events: pd.DataFrame,
    warmup_steps: int,
) -> list[LogGate]:
    """Every gate of the profile as the log judges it, in the profile's order."""
    return [judged for gate in gates for judged in judge_gate(gate, counts, events, warmup_steps)]


def judge_log_file(
    path: str | Path, name: str, gates: tuple[GateSettings, ...] | list[GateSettings], warmup_steps: int
) -> LogSummary:
    """The judge_log rule's work for one log: read it (InputError naming it when it is not a text log),
    parse its events, count them and judge the profile's gates on them."""
    text = read_log_text(path)
    events = parse_launcher_log(text)
    attribution = attribute_events(events)
    counts = log_counts(events, attribution)
    judged = judge_log_gates(gates, counts, events, warmup_steps)
    exits = [ExitError(**e) for e in counts["exit_errors"]]
    return LogSummary(
        log=str(path),
        name=name,
        lines=len(text.splitlines()),
        **{**counts, "exit_errors": exits},
        gates=judged,
        failures=[RankFailure(**failed) for failed in failures(attribution)],
    )
