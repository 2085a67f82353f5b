"""Several runs side by side, drawn and rendered: the comparison's figures (each group's loss and
step-time curves overlaid, each history's median step by commit) and its HTML page. What is compared, and
how (groups, ratios, noise, histories), is zerogate.analysis.compare's; the curves are
measures.loss_series and measures.step_time_per_step of each run's steps table.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from zerogate.analysis import measures  # noqa: E402
from zerogate.analysis.compare import (  # noqa: E402
    GROUP_BY,
    Comparison,
    History,
    gate_rows,
    history_rows,
    injection_of,
    noise_summary,
    quantity_rows,
    read_steps,
)
from zerogate.report.html import environment, fmt, image  # noqa: E402


def history_figure(found: list[History], path: str | Path) -> None:
    """One panel per history: the median optimizer step of each run (by commit) with its interval."""
    fig, axes = plt.subplots(max(1, len(found)), 1, figsize=(9, 3.4 * max(1, len(found))), squeeze=False)
    if not found:
        axes[0][0].axis("off")
        axes[0][0].text(0.5, 0.5, "No machine has runs of two commits: no history.", ha="center", va="center")
    for ax, history in zip(axes[:, 0], found):
        rows = history_rows(history)
        x = list(range(len(rows)))
        values = [r["value"] if r["value"] is not None else float("nan") for r in rows]
        low = [v - r["interval"].low if r["interval"] else 0 for v, r in zip(values, rows)]
        high = [r["interval"].high - v if r["interval"] else 0 for v, r in zip(values, rows)]
        ax.errorbar(x, values, yerr=[low, high], fmt="o-", capsize=4)
        ax.set_xticks(x, [r["commit"][:7] for r in rows], rotation=30)
        ax.set(xlabel="git commit at training", ylabel="median optimizer step (s)", title=history.title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def overlay_figure(comparison: Comparison, curve: str, ylabel: str, path: str | Path) -> None:
    """One panel per group, one curve per machine: ``curve`` is "loss" (measures.loss_series) or
    "step_time" (measures.step_time_per_step, the slowest rank at each step)."""
    series_of = {"loss": measures.loss_series, "step_time": measures.step_time_per_step}[curve]
    groups = comparison.groups
    fig, axes = plt.subplots(max(1, len(groups)), 1, figsize=(9, 3.8 * max(1, len(groups))), squeeze=False)
    if not groups:
        axes[0][0].axis("off")
        axes[0][0].text(
            0.5, 0.5, "No two runs measured the same thing: nothing to overlay.", ha="center", va="center"
        )
    for ax, group in zip(axes[:, 0], groups):
        for run in group.runs:
            series = series_of(read_steps(run))
            style = {"linewidth": 1.8} if run.machine == group.reference else {"linewidth": 1.0}
            label = f"{run.machine} (reference)" if run.machine == group.reference else run.machine
            ax.plot(series.index, series.to_numpy(), label=label, **style)
        ax.set(xlabel="optimizer step", ylabel=ylabel, title=group.title)
        ax.legend(title="machine", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_comparison(
    comparison: Comparison,
    figures: dict[str, str | Path],
    requested_reference: str | None = None,
    history: list[History] | None = None,
) -> str:
    runs = len(comparison.stragglers) + sum(len(group.runs) for group in comparison.groups)
    images = []
    if figures.get("history"):
        images.append(
            image(
                figures["history"],
                "Median optimizer step (slowest rank) by git commit, one panel per "
                "machine and profile, with each run's interval",
            )
        )
    return (
        environment()
        .get_template("comparison.html.j2")
        .render(
            title=f"zerogate comparison of {runs} runs",
            comparison=comparison,
            groups=[
                {
                    "number": number,
                    "group": group,
                    "quantities": quantity_rows(group),
                    "gates": gate_rows(group),
                    "noise": noise_summary(group),
                }
                for number, group in enumerate(comparison.groups, start=1)
            ],
            histories=[{"history": h, "rows": history_rows(h)} for h in (history or [])],
            history_images=images,
            injection=injection_of,
            requested_reference=requested_reference,
            group_by=list(GROUP_BY),
            images=[
                image(
                    figures["loss"],
                    "Training loss per optimizer step, one panel per group, one curve per machine",
                ),
                image(
                    figures["step_time"],
                    "Optimizer-step wall time (slowest rank at each step), one panel per group, "
                    "one curve per machine",
                ),
            ],
            fmt=fmt,
        )
    )
