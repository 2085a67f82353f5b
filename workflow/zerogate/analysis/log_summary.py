"""What one launcher log shows, counted from its events (zerogate.analysis.parse.parse_launcher_log): the
judge_log rule's summary (zerogate.contracts.log_summary.LogSummary). Each count is defined here once:

- ``skipped_steps``: ``overflow_skip`` events, one per optimizer step the fp16 loss scaler skipped however
  many ranks or lines reported it; ``hysteresis_skips`` those that kept the scale;
- ``last_loss_scale``: the scale the last scale line leaves (reduced to, increased to, or kept by a
  hysteresis skip);
- ``*_lines``: one per message of that kind (two ranks' messages written into one line are two);
- ``tracebacks``, ``fatal_loss_scale``, ``nccl_timeouts``: one per event of the kind;
- ``failed_ranks``: the ranks that failed (zerogate.analysis.failure_attribution's one definition), each
  with the lines that show it in ``failures``;
- ``exit_errors``: the exits the launchers and schedulers report, one per process, with the rank the
  attribution gives it (None where the log does not tell);
- ``world_size``: the largest the launcher (``dist_world_size``, ``WORLD INFO DICT``) or NCCL states;
- ``optimizer_steps``: the highest step a progress or throughput line names; ``progress_skipped``: DeepSpeed's
  own ``skipped=`` at its last progress line.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from zerogate.analysis.failure_attribution import Attribution, attribute_events

# Precision as the DeepSpeed config print or the optimizer's creation line states it.
FP16, BF16, FP32 = "fp16", "bf16", "fp32"


def details(events: pd.DataFrame, kind: str) -> list[dict[str, Any]]:
    """The detail objects of one kind's events, in line order."""
    return [json.loads(d) for d in events.loc[events["kind"] == kind, "detail"]]


def count(events: pd.DataFrame, kind: str) -> int:
    return int((events["kind"] == kind).sum())


def last_loss_scale(events: pd.DataFrame) -> float | None:
    """The scale after the last skip or increase the log shows (each skip at its first line)."""
    changes = events[events["kind"].isin(["overflow_skip", "loss_scale_increased"])]
    for _, event in changes.iloc[::-1].iterrows():
        detail = json.loads(event["detail"])
        scale = detail.get("scale_after") if event["kind"] == "overflow_skip" else detail["new"]
        if scale is not None:
            return float(scale)
    return None


def precision(events: pd.DataFrame) -> str | None:
    """fp16 or bf16 as the log states it (DeepSpeed's config print, its optimizer's creation line, or a
    loss scale in an overflow line); fp32 when the config print says neither is on; None when it is silent."""
    config: dict[str, Any] = {}
    for detail in details(events, "ds_config"):
        config.update(detail)
    scaled = any(d.get("attempted") is not None for d in details(events, "overflow_skip"))
    if config.get("fp16_enabled") is True or config.get("precision") == FP16 or scaled:
        return FP16
    if config.get("bfloat16_enabled") is True or config.get("precision") == BF16:
        return BF16
    if config.get("fp16_enabled") is False and config.get("bfloat16_enabled") is False:
        return FP32
    return None


def config_value(events: pd.DataFrame, key: str) -> Any:
    """The last value DeepSpeed's config print gives ``key`` (None when it prints none)."""
    values = [d[key] for d in details(events, "ds_config") if key in d]
    return values[-1] if values else None


def optimizer_steps(events: pd.DataFrame) -> int | None:
    """The highest optimizer step a progress or throughput line names."""
    named = events.loc[events["kind"].isin(["ds_progress", "throughput"]), "step"].dropna()
    return int(named.max()) if len(named) else None


def progress_skipped(events: pd.DataFrame) -> int | None:
    """DeepSpeed's cumulative skipped= at its last progress line (None without one)."""
    progress = details(events, "ds_progress")
    return int(progress[-1]["skipped"]) if progress else None


def failed_ranks(attribution: Attribution) -> list[int]:
    return [rank for rank in attribution.ranks if rank >= 0]


def exit_errors(attribution: Attribution) -> list[dict[str, Any]]:
    return [{"rank": rank, "code": code} for rank, code in attribution.exits]


def failures(attribution: Attribution) -> list[dict[str, Any]]:
    """Each failed rank (and the failures naming none) with how it failed and the lines that show it."""
    groups = [*attribution.failed, *([attribution.unnamed] if attribution.unnamed else [])]
    return [
        {
            "rank": group.rank,
            "causes": group.causes,
            "lines": [{"line": f.line, "kind": f.kind, "message": f.message} for f in group.lines],
        }
        for group in groups
    ]


def ambiguities(events: pd.DataFrame) -> list[str]:
    """Each ``ambiguous`` note of the events once, with its kind, in the order they first appear."""
    notes = (
        f"{kind}: {json.loads(detail)['ambiguous']}"
        for kind, detail in zip(events["kind"], events["detail"])
        if "ambiguous" in json.loads(detail)
    )
    return list(dict.fromkeys(notes))


def log_counts(events: pd.DataFrame, attribution: Attribution | None = None) -> dict[str, Any]:
    """The counts of the module docstring, keyed as zerogate.contracts.log_summary.LogSummary names them
    (``attribution``: the events' failures, when the caller has them already)."""
    attribution = attribution or attribute_events(events)
    skips = details(events, "overflow_skip")
    world = [d["world_size"] for d in details(events, "world_info")]
    return {
        "deepspeed_version": config_value(events, "deepspeed_version"),
        "precision": precision(events),
        "skipped_steps": len(skips),
        "hysteresis_skips": sum(1 for d in skips if d["hysteresis"]),
        "last_loss_scale": last_loss_scale(events),
        "optimizer_steps": optimizer_steps(events),
        "progress_skipped": progress_skipped(events),
        "progress_lines": count(events, "ds_progress"),
        "wall_clock_lines": count(events, "wall_clock"),
        "throughput_lines": count(events, "throughput"),
        "memory_lines": count(events, "memory"),
        "tracebacks": count(events, "traceback"),
        "fatal_loss_scale": count(events, "fatal_loss_scale"),
        "nccl_timeouts": count(events, "nccl_timeout"),
        "failed_ranks": failed_ranks(attribution),
        "exit_errors": exit_errors(attribution),
        "world_size": int(max(world)) if world else None,
        "ambiguities": ambiguities(events),
    }
