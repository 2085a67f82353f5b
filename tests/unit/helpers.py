"""Synthetic runs for the gate, figure and report tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from zerogate.analysis.parse import parse_launcher_log


def synthetic_steps(steps: int = 200, ranks: int = 2, step_time: float = 0.5, loss_start: float = 5.0,
                    loss_end: float = 1.0, memory_gib: float = 0.6, noise: float = 0.05, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    loss = np.linspace(loss_start, loss_end, steps) + rng.normal(0, noise, steps)
    rows = []
    for rank in range(ranks):
        for i in range(steps):
            t = step_time * (1 + 0.02 * rng.standard_normal())
            rows.append({
                "step": i + 1, "rank": rank, "loss": float(loss[i]), "loss_finite": True,
                "grad_norm": 1.0, "lr": 1e-3, "step_time(s)": t, "micro_step_time(s)": t / 8, "tokens": 200,
                "tokens_per_s": 200 / t, "memory/device_peak(GiB)": memory_gib + 0.01 * rank,
                "memory/device_peak_source": "VmHWM per step",
            })
    return pd.DataFrame(rows)


def no_events() -> pd.DataFrame:
    return parse_launcher_log("")


def spike_rule(profile: dict) -> "SpikeRule":
    """The profile's loss-spike rule, its stabiliser settings resolved the way the rules resolve them."""
    from zerogate.analysis.measures import SpikeRule
    from zerogate.config.settings import training_settings

    return SpikeRule.from_settings(training_settings(profile)["stabiliser"])
