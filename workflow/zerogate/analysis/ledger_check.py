"""Ledger vs measured: per rank, each term the run can measure against zerogate's prediction.

Measured on every accelerator: the bytes of the partitioned parameter, master-weight, gradient and
optimizer tensors each rank holds at the end of training (``held_bytes_rank<N>.json`` from
zerogate.train.held). On GPUs also the allocator peak and reserved peak (measures.peak_memory_per_rank of
``memory/max_allocated(GiB)`` and ``memory/max_reserved(GiB)`` in parse_logs' steps table) against the
predicted device total.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis import measures
from zerogate.plan.ledger import ModelCounts, Setup, model_state_bytes, zerogate_terms
from zerogate.units import GIB

ALLOCATOR_PEAKS = ("memory/max_allocated(GiB)", "memory/max_reserved(GiB)")
TENSOR_TERMS = ("parameters(bytes)", "master_parameters(bytes)", "gradients(bytes)", "optimizer_states(bytes)")


def error_percent(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured in percent; None when nothing was measured."""
    return None if not measured else 100.0 * (predicted - measured) / measured


def _row(rank: int, term: str, predicted: float, measured: float, source: str) -> dict[str, Any]:
    return {"rank": rank, "term": term, "predicted(bytes)": int(predicted), "measured(bytes)": int(measured),
            "error(%)": error_percent(predicted, measured), "measured_by": source}


def read_measurements(metrics_dir: str | Path, steps: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Per rank: the held tensor bytes (``held_bytes_rank<N>.json`` in ``metrics_dir``), and on GPUs the
    allocator peaks over all steps in bytes (measures.peak_memory_per_rank of parse_logs' steps table)."""
    ranks: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(metrics_dir).glob("held_bytes_rank*.json")):
        held = json.loads(path.read_text())
        ranks[int(held["rank"])] = {"held": held}
    for key in ALLOCATOR_PEAKS:
        for rank, peak in measures.peak_memory_per_rank(steps, key).items():
            ranks.setdefault(rank, {}).setdefault("peaks", {})[key] = peak * GIB
    return ranks


def compare(counts: ModelCounts, setup: Setup, measured: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The table (one row per rank and term) and the worst error on the model-state total."""
    predicted_states = model_state_bytes(counts, setup)
    device_total = sum(zerogate_terms(counts, setup)["device"].values())
    rows = []
    for rank in sorted(measured):
        held = measured[rank].get("held")
        if held:
            for term in TENSOR_TERMS:
                rows.append(_row(rank, term.removesuffix("(bytes)"), predicted_states[term], held[term], "held tensors"))
            rows.append(_row(rank, "model_states_total", sum(predicted_states.values()),
                             sum(held[t] for t in TENSOR_TERMS), "held tensors"))
        for key, value in measured[rank].get("peaks", {}).items():
            rows.append(_row(rank, f"device_total vs {key}", device_total, value, "torch.cuda allocator"))
    totals = [r["error(%)"] for r in rows if r["term"] == "model_states_total" and r["error(%)"] is not None]
    worst = max((abs(e) for e in totals), default=None)
    return {
        "scheme": setup.scheme,
        "ranks": setup.ranks,
        "dtype": setup.dtype,
        "parameters": counts.total,
        "rows": rows,
        "max_abs_model_state_error(%)": worst,
        "within_5_percent": None if worst is None else worst <= 5.0,
    }
