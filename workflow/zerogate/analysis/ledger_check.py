"""Ledger vs measured: per rank, each term the run can measure against zerogate's prediction.

Measured on every accelerator: the bytes of the partitioned parameter, master-weight, gradient and
optimizer tensors each rank holds at the end of training (``held_bytes_rank<N>.json`` from
zerogate.train.held). Each level of the predicted peak (plan/peak_memory.json, its ``levels``) against the
measurement with the same definition (:func:`level_rows`): on GPUs the tensor peak against
``memory/max_allocated(GiB)``, the allocator's against ``memory/max_reserved(GiB)`` and the device's against
``memory/nvml_process_peak(GiB)`` (max over steps, measures.peak_memory_per_rank); on the CPU accelerator the
tensor peak against the live-tensor peak of one sampled step (``live_tensors_rank<N>.json``, zerogate.train.
live_peak), also without the gradient buckets (sized by the config, not the model) on both sides, and the
resident set against ``memory/peak_rss(GiB)``. The run's own peak metric (the resident set on the CPU, the
reserved peak on GPUs) keeps its diagnosis: where it misses by more than :data:`PEAK_TOLERANCE` the row says
which part is off, from the per-window peaks the metrics record (:func:`peak_diagnosis`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis import measures
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import PeakPrediction
from zerogate.contracts.records import HeldBytes, LiveTensorPeak, column
from zerogate.predict.levels import TRANSIENT_TERMS
from zerogate.predict.setup import Setup
from zerogate.predict.zero_terms import MODEL_STATES, model_state_bytes
from zerogate.units import GIB, format_bytes

# The GPU peak levels and the step-record column that measures each (max over steps).
GPU_LEVEL_COLUMNS = {
    "tensor": column("max_allocated_gib"),
    "allocator": column("max_reserved_gib"),
    "device": column("nvml_process_peak_gib"),
}
BUCKETS_EXCLUDED = "tensor without the gradient buckets"
# The target: a peak prediction within +-15 % of the measured peak.
PEAK_TOLERANCE = 15.0
RSS = column("rss_gib")
PEAK_RSS = column("peak_rss_gib")
# Freed memory the C allocator kept at a window's end (zerogate.runtime.heap.allocator_free_bytes):
# resident-set garbage no prediction term counts, measured so that a persistent miss can be told apart from
# it.
ALLOCATOR_FREE = column("allocator_free_gib")


def error_percent(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured in percent; None when nothing was measured."""
    return None if not measured else 100.0 * (predicted - measured) / measured


def _row(rank: int, term: str, predicted: float, measured: float, source: str) -> dict[str, Any]:
    return {
        "rank": rank,
        "term": term,
        "predicted(bytes)": int(predicted),
        "measured(bytes)": int(measured),
        "error(%)": error_percent(predicted, measured),
        "measured_by": source,
    }


def read_measurements(metrics_dir: str | Path, steps: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Per rank: the held tensor bytes (``held_bytes_rank<N>.json`` in ``metrics_dir``), the sampled step's
    live-tensor peak (``live_tensors_rank<N>.json``, CPU accelerator), and on GPUs each level's peak over all
    steps in bytes (measures.peak_memory_per_rank of parse_logs' steps table)."""
    ranks: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(metrics_dir).glob("held_bytes_rank*.json")):
        held = HeldBytes.read(path)
        ranks.setdefault(held.rank, {})["held"] = held
    for path in sorted(Path(metrics_dir).glob("live_tensors_rank*.json")):
        live = LiveTensorPeak.read(path)
        ranks.setdefault(live.rank, {})["live"] = live
    for level, key in GPU_LEVEL_COLUMNS.items():
        for rank, peak in measures.peak_memory_per_rank(steps, key).items():
            ranks.setdefault(rank, {}).setdefault("peaks", {})[level] = peak * GIB
    return ranks


def compare(counts: ModelCounts, setup: Setup, measured: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The model-state table (one row per rank and term) and the worst error on the model-state total."""
    predicted_states = model_state_bytes(counts, setup)
    rows = []
    for rank in sorted(measured):
        held: HeldBytes | None = measured[rank].get("held")
        if held:
            for term in MODEL_STATES:
                rows.append(
                    _row(rank, term, predicted_states[f"{term}(bytes)"], held.term(term), "held tensors")
                )
            rows.append(
                _row(
                    rank,
                    "model_states_total",
                    sum(predicted_states.values()),
                    sum(held.term(t) for t in MODEL_STATES),
                    "held tensors",
                )
            )
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


def _level_row(
    rank: int, level: str, what: str, predicted: float, measured: float, source: str
) -> dict[str, Any]:
    return {**_row(rank, "peak", predicted, measured, source), "level": level, "what": what}


def level_rows(
    prediction: PeakPrediction, measured: dict[int, dict[str, Any]], steps: pd.DataFrame
) -> list[dict[str, Any]]:
    """Per rank and level of the prediction, predicted against measured with the same definition (the
    module docstring); a level nothing measured has no row."""
    rows = []
    levels = prediction.levels
    for rank in sorted(measured):
        if prediction.accelerator == "cpu":
            live: LiveTensorPeak | None = measured[rank].get("live")
            if live is not None and "tensor" in levels:
                tensor = levels["tensor"]
                source = f"live tensors of sampled step {live.step}"
                rows.append(
                    _level_row(rank, "tensor", tensor.what, tensor.predicted_bytes, live.peak_bytes, source)
                )
                predicted_buckets = tensor.terms_bytes.get("reduce_bucket", 0)
                if live.buffers_bytes and predicted_buckets:
                    # Both sides without the buckets: the predicted bucket at full size, the measured
                    # storages.
                    rows.append(
                        _level_row(
                            rank,
                            BUCKETS_EXCLUDED,
                            "the live-tensor peak less the gradient buckets "
                            "(sized by reduce_bucket_size, not by the model)",
                            tensor.predicted_bytes - predicted_buckets,
                            live.peak_bytes - sum(live.buffers_bytes.values()),
                            source + " less the buckets' storages",
                        )
                    )
        else:
            for level, key in GPU_LEVEL_COLUMNS.items():
                value = measured[rank].get("peaks", {}).get(level)
                if value is not None and level in levels:
                    rows.append(
                        _level_row(
                            rank,
                            level,
                            levels[level].what,
                            levels[level].predicted_bytes,
                            value,
                            f"{key}, max over steps",
                        )
                    )
    if prediction.accelerator == "cpu" and "resident_set" in levels:
        for rank, peak in sorted(measures.peak_memory_per_rank(steps, PEAK_RSS).items()):
            rows.append(
                _level_row(
                    rank,
                    "resident_set",
                    levels["resident_set"].what,
                    levels["resident_set"].predicted_bytes,
                    peak * GIB,
                    f"{PEAK_RSS}, max over steps",
                )
            )
    return sorted(rows, key=lambda r: (r["rank"], list(LEVEL_ORDER).index(r["level"])))


LEVEL_ORDER = ("tensor", BUCKETS_EXCLUDED, "allocator", "device", "resident_set")


def peak_diagnosis(prediction: PeakPrediction, steps: pd.DataFrame, rank: int) -> dict[str, Any] | None:
    """Which part of the predicted peak is off, from the per-window record of ``rank``.

    Every window (one optimizer step) records its peak (``memory/peak_rss``, VmHWM reset per window) and
    the resident set at its end (``memory/rss``). At the window of the run's peak, the end-of-window
    resident set is what stays between steps (the persistent terms: runtime baseline, model states, shm
    buffer) and the peak above it is what comes and goes inside a step (the transient terms: gathered
    parameters, gradient buckets, activations). Each is compared with its prediction; the larger miss
    names the terms. None where the record lacks the end-of-window resident set (GPUs: the allocator)."""
    metric = prediction.metric
    own = steps[steps["rank"] == rank]
    if metric != PEAK_RSS or RSS not in own or own[metric].isna().all():
        return None
    at = own.loc[pd.to_numeric(own[metric], errors="coerce").idxmax()]
    resident = float(at[RSS]) * GIB
    transient = max(0.0, float(at[metric]) * GIB - resident)
    first = own.loc[own["step"].idxmin()]
    parts = {
        "persistent": {
            "predicted(bytes)": prediction.persistent_bytes,
            "measured(bytes)": int(resident),
            "terms": [k for k in prediction.terms_bytes if k not in TRANSIENT_TERMS],
        },
        "transient": {
            "predicted(bytes)": prediction.transient_bytes,
            "measured(bytes)": int(transient),
            "terms": [k for k in prediction.terms_bytes if k in TRANSIENT_TERMS],
        },
    }
    for part in parts.values():
        part["miss(bytes)"] = part["predicted(bytes)"] - part["measured(bytes)"]
    free = pd.to_numeric(pd.Series([at.get(ALLOCATOR_FREE)]), errors="coerce").iloc[0]
    held_free = None if pd.isna(free) else int(free * GIB)
    parts["persistent"]["allocator_free(bytes)"] = held_free
    # The part that is off: the larger miss once the allocator's freed memory, measured, stands in for the
    # retained heap predicted (only an under-prediction can be explained by it).
    retained = prediction.terms_bytes.get("retained_heap", 0)
    unexplained = {name: part["miss(bytes)"] for name, part in parts.items()}
    if held_free and unexplained["persistent"] < 0:
        unexplained["persistent"] = min(0, unexplained["persistent"] + max(0, held_free - retained))
    off = max(parts, key=lambda name: abs(unexplained[name]))
    terms = {k: prediction.terms_bytes[k] for k in parts[off]["terms"]}
    largest = max(terms, key=terms.get) if terms else None
    sign = "over" if parts[off]["miss(bytes)"] > 0 else "under"
    note = (
        f"the {off} terms ({', '.join(parts[off]['terms'])}) are {sign}-predicted by "
        f"{format_bytes(abs(parts[off]['miss(bytes)']))} at step {int(at['step'])} "
        f"(predicted {format_bytes(parts[off]['predicted(bytes)'])}, measured "
        f"{format_bytes(parts[off]['measured(bytes)'])})"
        + (f"; its largest predicted term: {largest} {format_bytes(terms[largest])}" if largest else "")
    )
    if held_free and parts["persistent"]["miss(bytes)"] < 0:
        note += (
            f"; of the resident set between steps, {format_bytes(held_free)} is freed memory the C allocator "
            "kept "
            f"({ALLOCATOR_FREE} at the step's end; predicted as retained_heap: {format_bytes(retained)}), "
            f"which leaves the persistent terms {format_bytes(-unexplained['persistent'])} short"
        )
    return {
        "window_step": int(at["step"]),
        "first_window": {
            "step": int(first["step"]),
            "peak(bytes)": int(float(first[metric]) * GIB),
            "resident_at_end(bytes)": int(float(first[RSS]) * GIB),
        },
        "parts": parts,
        "off": off,
        "note": note,
    }


def peak_rows(prediction: PeakPrediction, steps: pd.DataFrame) -> list[dict[str, Any]]:
    """Per rank: the predicted peak against the measured one (measures.peak_memory_per_rank of the
    prediction's metric), with the error and, beyond :data:`PEAK_TOLERANCE`, the part that is off."""
    rows = []
    for rank, peak in sorted(measures.peak_memory_per_rank(steps, prediction.metric).items()):
        row = _row(rank, "peak", prediction.total_bytes, peak * GIB, f"{prediction.metric}, max over steps")
        row["within_tolerance"] = row["error(%)"] is not None and abs(row["error(%)"]) <= PEAK_TOLERANCE
        diagnosis = peak_diagnosis(prediction, steps, rank)
        row["diagnosis"] = diagnosis
        # The prediction with the allocator's freed memory at the peak's window, measured, in place of the
        # retained heap it predicts (None where not recorded): evidence for that term, not the judged error.
        held_free = diagnosis["parts"]["persistent"]["allocator_free(bytes)"] if diagnosis else None
        retained = prediction.terms_bytes.get("retained_heap", 0)
        row["with_allocator_free(bytes)"] = (
            None if held_free is None else row["predicted(bytes)"] - retained + held_free
        )
        row["with_allocator_free_error(%)"] = (
            None
            if held_free is None
            else error_percent(row["with_allocator_free(bytes)"], row["measured(bytes)"])
        )
        row["off"] = None if row["within_tolerance"] or diagnosis is None else diagnosis["note"]
        rows.append(row)
    return rows


def with_peaks(
    table: dict[str, Any],
    prediction: PeakPrediction,
    steps: pd.DataFrame,
    measured: dict[int, dict[str, Any]] | None = None,
) -> LedgerTable:
    """The ledger table with the peak rows of the run's peak metric, every level's rows (``measured``:
    read_measurements' figures) and the prediction's terms beside the model-state rows."""
    rows = peak_rows(prediction, steps)
    errors = [abs(r["error(%)"]) for r in rows if r["error(%)"] is not None]
    levels = level_rows(prediction, measured or {}, steps)
    worst: dict[str, float | None] = {}
    for row in levels:
        if row["error(%)"] is not None:
            worst[row["level"]] = max(worst.get(row["level"]) or 0.0, abs(row["error(%)"]))
    return LedgerTable.of(
        {
            **table,
            "peak": {
                "prediction": prediction,
                "rows": rows,
                "tolerance(%)": PEAK_TOLERANCE,
                "max_abs_error(%)": max(errors, default=None),
                "within_tolerance": bool(errors) and max(errors) <= PEAK_TOLERANCE,
            },
            "levels": levels,
            "level_max_abs_error(%)": worst,
        },
        "the ledger table",
    )
