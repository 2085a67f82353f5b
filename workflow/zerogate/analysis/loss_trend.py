"""The loss's trend over a run: its spikes and its convergence.

- Loss spike: the loss stabiliser's rule (zerogate.train.stabiliser), replayed on the recorded series
  with the profile's ``stabiliser`` settings (``spike_window``, ``spike_threshold``,
  ``spike_min_history``): a finite loss whose robust z-score (zerogate.robust.robust_z: median and
  MAD x 1.4826 of the history) exceeds the threshold -- upward only, z > threshold, as the stabiliser
  judges at training time (a sudden drop is not a spike), once the history holds ``spike_min_history``
  losses. The history is the last ``spike_window`` losses of steps whose update was applied
  (``update_applied`` where recorded) and that were not spikes themselves.
- Loss convergence: ``loss_convergence`` below, over every step's loss, settings from the gate's
  ``convergence`` block in the profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from zerogate.analysis.columns import UPDATE_APPLIED
from zerogate.analysis.health import step_span
from zerogate.analysis.measures import loss_series
from zerogate.config.judging import GateSettings
from zerogate.contracts.summary import LossSpikes, SpikeRule
from zerogate.robust import MAD_TO_SIGMA, robust_z


def loss_spikes(steps: pd.DataFrame, rule: SpikeRule) -> LossSpikes:
    """Replay the loss stabiliser's spike rule over the recorded loss series (see the module's
    definitions)."""
    series = loss_series(steps)
    applied = None
    if UPDATE_APPLIED in steps.columns:
        first = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
        applied = first[UPDATE_APPLIED].to_numpy()
    history: list[float] = []
    found: list[int] = []
    for position, (step, loss) in enumerate(series.items()):
        if not np.isfinite(loss):
            continue
        if len(history) >= rule.min_history:
            z = robust_z(float(loss), history[-rule.window :])
            if z is not None and z > rule.threshold:
                found.append(int(step))
                continue
        if (
            applied is None
            or applied[position] is None
            or pd.isna(applied[position])
            or bool(applied[position])
        ):
            history.append(float(loss))
    return LossSpikes(count=len(found), steps=found, rule=rule.describe())


@dataclass(frozen=True)
class ConvergenceRule:
    """The loss-convergence definition's settings, from the gate's ``convergence`` block in the profile."""

    initial_steps: int
    final_fraction: float
    max_rebound: float
    min_drop_sigmas: float

    @classmethod
    def from_gate(cls, gate: GateSettings) -> ConvergenceRule:
        block = gate.convergence
        if block is None:
            raise ValueError(f"gate {gate.name}: a loss_convergence gate needs its convergence block")
        return cls(
            int(block.initial_steps),
            float(block.final_fraction),
            float(block.max_rebound),
            float(block.min_drop_sigmas),
        )


@dataclass(frozen=True)
class Convergence:
    """The loss-convergence statistic of one run (see the profile's loss_convergence definition)."""

    steps: int
    nonfinite_steps: list[int]
    initial: float
    final: float
    lowest_block: float
    final_spread: float
    ratio: float
    rebound: float
    drop_sigmas: float

    def problems(self, rule: ConvergenceRule) -> list[str]:
        found = []
        if self.nonfinite_steps:
            found.append(
                f"non-finite loss at {len(self.nonfinite_steps)} steps ({step_span(self.nonfinite_steps)})"
            )
            return found
        if not self.drop_sigmas >= rule.min_drop_sigmas:
            found.append(
                f"the drop from the initial to the final loss is {self.drop_sigmas:.3g} final-block "
                f"standard deviations, not >= {rule.min_drop_sigmas:g}"
            )
        if not self.rebound <= rule.max_rebound:
            found.append(
                f"the final loss is back up {self.rebound:.3g} of the drop to the lowest block mean "
                f"(more than {rule.max_rebound:g})"
            )
        return found


def loss_convergence(steps: pd.DataFrame, rule: ConvergenceRule) -> Convergence:
    """Every optimizer step's loss (measures.loss_series), none left out:
    - initial: the median loss of the first ``initial_steps`` steps;
    - final: the mean loss of the last block, the last ``final_fraction`` of the steps (at least one);
    - blocks: consecutive blocks of that length from the end backwards; lowest block: the lowest block mean;
    - ratio = final / initial; rebound = (final - lowest block) / (initial - lowest block), 0 when the final
      block is the lowest (inf when nothing dropped); drop_sigmas = (initial - final) / the final block's
      robust standard deviation (1.4826 MAD; inf when that is 0 and the loss dropped).
    A non-finite loss anywhere makes every figure NaN and is listed."""
    series = loss_series(steps)
    values = series.to_numpy(dtype=float)
    n = len(values)
    bad = [int(step) for step, value in series.items() if not np.isfinite(value)]
    nan = float("nan")
    if bad or n == 0:
        return Convergence(n, bad, nan, nan, nan, nan, nan, nan, nan)
    block = max(1, int(round(n * rule.final_fraction)))
    initial = float(np.median(values[: max(1, rule.initial_steps)]))
    ends = range(n, 0, -block)
    means = [float(values[max(0, end - block) : end].mean()) for end in ends]
    final, lowest = means[0], min(means)
    tail = values[n - block :]
    spread = float(np.median(np.abs(tail - np.median(tail)))) * MAD_TO_SIGMA
    drop = initial - final
    sigmas = drop / spread if spread > 0 else (float("inf") if drop > 0 else 0.0)
    fallen = initial - lowest
    rebound = (final - lowest) / fallen if fallen > 0 else (0.0 if final <= lowest else float("inf"))
    ratio = final / initial if initial > 0 else nan
    return Convergence(n, [], initial, final, lowest, spread, ratio, rebound, sigmas)
