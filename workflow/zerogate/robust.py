"""Robust spread and z-scores, shared by the loss stabiliser (at training time) and the gates' spike
count (at analysis time): one definition of a loss spike. numpy only."""

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
