"""Ledger vs measured: per rank, each term the run can measure against zerogate's prediction.

Measured on every accelerator: the bytes of the partitioned parameter, master-weight, gradient and
optimizer tensors each rank holds at the end of training (``held_bytes_rank<N>.json`` from
zerogate.train.held). On GPUs also the allocator peak and reserved peak (max over steps of the metrics'
``memory/max_allocated(GiB)`` and ``memory/max_reserved(GiB)``) against the predicted device total.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerogate.plan.ledger import GIB, ModelCounts, Setup, model_state_bytes, zerogate_terms

TENSOR_TERMS = ("parameters(bytes)", "master_parameters(bytes)", "gradients(bytes)", "optimizer_states(bytes)")


def error_percent(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured in percent; None when nothing was measured."""
    return None if not measured else 100.0 * (predicted - measured) / measured


def _row(rank: int, term: str, predicted: float, measured: float, source: str) -> dict[str, Any]:
    return {"rank": rank, "term": term, "predicted(bytes)": int(predicted), "measured(bytes)": int(measured),
            "error(%)": error_percent(predicted, measured), "measured_by": source}


def read_measurements(metrics_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Per rank: the held tensor bytes, and on GPUs the allocator peaks over all steps (bytes)."""
    ranks: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(metrics_dir).glob("held_bytes_rank*.json")):
        held = json.loads(path.read_text())
        ranks[int(held["rank"])] = {"held": held}
    for path in sorted(Path(metrics_dir).glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        peaks: dict[str, float] = {}
        for line in path.read_text().splitlines():
            record = json.loads(line)
            for key in ("memory/max_allocated(GiB)", "memory/max_reserved(GiB)"):
                if record.get(key) is not None:
                    peaks[key] = max(peaks.get(key, 0.0), record[key])
        ranks.setdefault(rank, {})["peaks"] = {k: v * GIB for k, v in peaks.items()}
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
