"""Robust spread and z-scores, shared by the loss stabiliser (at training time) and the gates' spike
count (at analysis time): one definition of a loss spike; and the quartiles of repeated timings (the
micro-benchmarks' spread, zerogate.predict.microbench). numpy only."""

from __future__ import annotations

import math

import numpy as np

# 1.4826 x MAD estimates the standard deviation of normally distributed data.
MAD_TO_SIGMA = 1.4826


def robust_z(value: float, history: list[float] | np.ndarray) -> float | None:
    """(value - median) / (1.4826 MAD) of the history; None where the history has no spread."""
    values = np.asarray(history, dtype=float)
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median))) * MAD_TO_SIGMA
    if mad <= 0 or not math.isfinite(mad):
        return None
    return (value - median) / mad


def quartiles(values: list[float] | np.ndarray) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile) of ``values``, numpy's default (linear) interpolation:
    the spread of a few repeated timings, which one disturbed repeat moves little."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("quartiles of no values")
    q1, median, q3 = np.quantile(data, [0.25, 0.5, 0.75])
    return float(q1), float(median), float(q3)
