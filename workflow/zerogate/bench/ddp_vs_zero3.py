"""Step time of zerogate's ZeRO-3 configuration against plain PyTorch DDP, same model and data
(`make bench`, target bench_ddp_vs_zero3).

Rows: DDP (the training loop with the DDP engine: torch DDP, gloo, no_sync accumulation); ZeRO-3 as rendered
(with the
CPU communication tuning of zerogate.render.cpu_tuning, the pipeline's step time after that tuning); ZeRO-3
without that tuning (the claim's overlap_comm, the "auto" hidden_size^2 bucket rule, DeepSpeed's default
leaf modules: the step time before it); and two reference rows that place the gap, the same rendered
config at ZeRO stage 0 (the DeepSpeed engine without partitioning) and at stage 2 with the optimizer
offload (zerogate.render.variants). Target: ZeRO-3 / DDP at most 1.5 on the default profile.

Each run's step time is zerogate.analysis.measures.step_time (median after the warm-up, slowest rank) of
its metrics; a row is the median over its repeats.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from zerogate.analysis.measures import step_time
from zerogate.analysis.parse import read_rank_metrics

# Row -> what it is; the order of the table.
ROWS = {
    "ddp": "DDP (torch DDP, gloo, no_sync accumulation)",
    "zero3-untuned": "ZeRO-3, without zerogate.render.cpu_tuning (before)",
    "zero3": "ZeRO-3, config as rendered (after)",
    "zero0": "reference: DeepSpeed ZeRO-0 (no partitioning)",
    "zero2-offload": "reference: ZeRO-2 + optimizer offload",
}
TARGET_RATIO = 1.5


def run_step_time(metrics_dir: str | Path, warmup_steps: int) -> float:
    """One run's step time: the pipeline's definition, on the run's per-rank metrics."""
    return step_time(read_rank_metrics(metrics_dir), warmup_steps).value


def table(runs: dict[str, list[str]], warmup_steps: int) -> dict[str, Any]:
    """``runs``: row -> the metrics directories of its repeats. Each row's step time (median over
    repeats), each repeat's, and the ratio to DDP."""
    rows = []
    for name, label in ROWS.items():
        per_repeat = [run_step_time(d, warmup_steps) for d in runs[name]]
        rows.append(
            {
                "run": name,
                "label": label,
                "step_time(s)": statistics.median(per_repeat),
                "per_repeat_step_time(s)": per_repeat,
            }
        )
    ddp = rows[0]["step_time(s)"]
    for row in rows:
        row["ratio_to_ddp"] = row["step_time(s)"] / ddp
    return {
        "warmup_steps": warmup_steps,
        "repeats": len(runs["ddp"]),
        "target_ratio_zero3_to_ddp": TARGET_RATIO,
        "rows": rows,
    }


def text(result: dict[str, Any], profile: str, steps: int) -> str:
    lines = [
        f"DDP vs ZeRO-3, profile {profile}: {steps} optimizer steps x {result['repeats']} repeat(s); step "
        "time = "
        f"median after {result['warmup_steps']} warm-up steps, slowest rank (zerogate.analysis.measures)"
    ]
    for row in result["rows"]:
        ratio = "" if row["run"] == "ddp" else f"  ratio to DDP {row['ratio_to_ddp']:.2f}"
        target = f"  (target <= {result['target_ratio_zero3_to_ddp']})" if row["run"] == "zero3" else ""
        repeats = ", ".join(f"{t:.4f}" for t in row["per_repeat_step_time(s)"])
        lines.append(f"  {row['label']:<52} {row['step_time(s)']:.4f} s{ratio}{target}  [runs: {repeats}]")
    return "\n".join(lines)
