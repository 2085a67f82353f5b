"""Seaborn figures of a run: loss, step time and memory per rank, compute and wait per rank.

What a figure marks as a statistic (the slowest-rank median, each rank's peak, the loss spikes, the warm-up,
the rank balance) is the run summary's (zerogate.contracts.summary); the curves are the step records' (the
definitions of zerogate.analysis.measures). Each figure function returns the numbers it marked, so a test
can check that the picture shows what the gates and the report say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from zerogate.analysis import measures  # noqa: E402
from zerogate.analysis.columns import DEVICE_PEAK, LOSS_SCALE, STEP_TIME, WAIT  # noqa: E402
from zerogate.analysis.rank_balance import rank_times  # noqa: E402
from zerogate.contracts.records import column  # noqa: E402
from zerogate.contracts.summary import RunSummary  # noqa: E402
from zerogate.contracts.verdicts import GateVerdict, GateVerdicts  # noqa: E402
from zerogate.units import GIB, UNIT_BYTES  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")


def _gate(verdicts: GateVerdicts, metric: str) -> GateVerdict | None:
    """The first gate on ``metric`` (a steps-table column), or on a memory metric when ``metric`` is
    "memory/"."""
    return next(
        (
            g
            for g in verdicts.gates
            if g.metric == metric or (metric == "memory/" and g.metric.startswith(metric))
        ),
        None,
    )


def loss_figure(
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: RunSummary,
    path: str | Path,
    stabiliser: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Loss raw and smoothed, the run summary's loss spikes circled and its warm-up shaded; launcher events
    (overflow, crash) as dotted lines and, when given, the training loop's stabiliser events (rows with
    step, rank, kind, value, action) as markers. Returns the spikes it marked."""
    warmup_steps, spikes = summary.warmup_steps_excluded, summary.loss_spikes
    loss = measures.loss_series(steps)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(
        loss.index,
        loss.to_numpy(),
        color="0.7",
        linewidth=0.8,
        label="loss (mean over accumulation and ranks)",
    )
    ax.plot(
        loss.index,
        measures.smooth(loss.reset_index(drop=True)).to_numpy(),
        color="C0",
        linewidth=2,
        label="smoothed (rolling median)",
    )
    if spikes.count:
        ax.scatter(
            spikes.steps,
            loss.loc[spikes.steps].to_numpy(),
            s=80,
            facecolors="none",
            edgecolors="C3",
            zorder=4,
            label=f"loss spikes ({spikes.count}: {spikes.rule})",
        )
    if warmup_steps:
        ax.axvspan(0, warmup_steps, color="C1", alpha=0.12, label=f"warm-up ({warmup_steps} steps)")
    marked = (
        events[events["step"].notna() & events["kind"].isin(["overflow", "traceback", "fatal_loss_scale"])]
        if len(events)
        else events
    )
    for step in marked["step"].dropna().unique() if len(marked) else []:
        ax.axvline(int(step), color="C3", linestyle=":", linewidth=1)
    if len(marked):
        ax.plot([], [], color="C3", linestyle=":", label="overflow / crash in the launcher log")
    if stabiliser is not None and len(stabiliser):
        at = loss
        for (kind, action), group in stabiliser.groupby(["kind", "action"], dropna=False):
            shown = group[group["step"].isin(at.index)]
            ax.scatter(
                shown["step"],
                at.loc[shown["step"]].to_numpy(),
                marker="v",
                s=36,
                zorder=3,
                label=f"stabiliser: {kind} -> {action} ({len(group)})",
            )
    ax.set(xlabel="optimizer step", ylabel="training loss (nats/token)", title="Loss")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"loss_spikes": spikes.count, "spike_steps": spikes.steps}


def step_time_figure(
    steps: pd.DataFrame, summary: RunSummary, verdicts: GateVerdicts, path: str | Path
) -> dict[str, Any]:
    """Step time per rank over the run, and the distribution over the timed steps (measures.timed_steps)
    with the run's slowest-rank median (its own statistics in the run summary). Returns the median and the
    timed-step count."""
    warmup_steps, own = summary.warmup_steps_excluded, summary.repeats[0]
    fig, (ax_line, ax_hist) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    data = steps.assign(rank=steps["rank"].astype(str))
    sns.lineplot(data=data, x="step", y=STEP_TIME, hue="rank", ax=ax_line, linewidth=0.8)
    timed = measures.timed_steps(data, warmup_steps)
    if len(timed):
        sns.histplot(data=timed, x=STEP_TIME, hue="rank", ax=ax_hist, bins=40, element="step")
    else:
        ax_hist.text(
            0.5,
            0.5,
            "no timed step\n(the run stopped within its warm-up)",
            ha="center",
            va="center",
            transform=ax_hist.transAxes,
        )
    # A run that stopped within its warm-up has no timed step, and so no median to draw.
    median = own.step_time_median_s if own is not None and len(timed) else None
    if median is not None:
        ax_hist.axvline(
            median,
            color="k",
            linestyle=":",
            label=f"median, slowest rank ({own.slowest_rank}): {median:.3g} s",
        )
    gate = _gate(verdicts, STEP_TIME)
    if gate is not None:
        for ax, line in ((ax_line, ax_line.axhline), (ax_hist, ax_hist.axvline)):
            line(gate.threshold, color="C3", linestyle="--", label=f"claim {gate.threshold:g} s")
        ax_line.legend(title="rank")
    if ax_hist.get_legend_handles_labels()[0]:
        ax_hist.legend(loc="upper right", fontsize="small")
    ax_line.set(xlabel="optimizer step", ylabel="optimizer-step wall time (s)", title="Step time per rank")
    ax_hist.set(xlabel="optimizer-step wall time (s), timed steps", ylabel="steps", title="Distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {
        "step_time_median(s)": median,
        "timed_steps": int(timed["step"].nunique()),
    }


def memory_figure(
    steps: pd.DataFrame, summary: RunSummary, verdicts: GateVerdicts, path: str | Path
) -> dict[str, Any]:
    """Peak memory per rank per step, each rank's peak (the run summary's) in the legend.
    Returns the peaks it labelled."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    own = summary.repeats[0]
    peaks = own.peak_memory_per_rank_gib if own is not None else {}
    data = steps.assign(
        rank=[f"{rank} (peak {peaks.get(int(rank), float('nan')):.3g} GiB)" for rank in steps["rank"]]
    )
    sns.lineplot(data=data, x="step", y=DEVICE_PEAK, hue="rank", ax=ax)
    source = ", ".join(
        sorted(steps.get(column("device_peak_source"), pd.Series(dtype=str)).dropna().unique())
    )
    gate = _gate(verdicts, "memory/")
    if gate is not None and gate.unit in UNIT_BYTES:
        threshold_gib = gate.threshold * UNIT_BYTES[gate.unit] / GIB
        ax.axhline(
            threshold_gib,
            color="C3",
            linestyle="--",
            label=f"claim {gate.threshold:g} {gate.unit} = {threshold_gib:.2f} GiB",
        )
        ax.legend(title="rank")
    ax.set(xlabel="optimizer step", ylabel="peak memory per step (GiB)", title=f"Memory per rank ({source})")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"peak_memory_per_rank(GiB)": peaks}


def loss_scale_series(steps: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame | None:
    """The fp16 loss scale per step: from the records' ``loss_scale`` column, else from the launcher's
    overflow lines (the scale after each reduction). None for runs without a loss scaler (fp32, bf16).
    A picture of the scale only: the skipped-step statistics come from measures.overflow_skips."""
    if measures.loss_scaler_present(steps):
        first = steps[steps["rank"] == steps["rank"].min()]
        return first[["step", LOSS_SCALE]].dropna()
    if not len(events):
        return None
    changes = events[events["kind"].isin(["overflow", "loss_scale_reduced"])]
    rows = [
        {"step": s, LOSS_SCALE: json.loads(d).get("new")} for s, d in zip(changes["step"], changes["detail"])
    ]
    rows = [r for r in rows if r[LOSS_SCALE] is not None and not pd.isna(r["step"])]
    return pd.DataFrame(rows) if rows else None


def loss_scale_figure(series: pd.DataFrame, path: str | Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.step(series["step"], series[LOSS_SCALE], where="post", color="C2")
    ax.set_yscale("log", base=2)
    ax.set(xlabel="optimizer step", ylabel="fp16 loss scale (log2 axis)", title="Dynamic loss scale")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def no_loss_scale_figure(path: str | Path) -> None:
    """Stands in for the loss-scale figure of a run without a loss scaler (Snakemake needs the file)."""
    fig, ax = plt.subplots(figsize=(9, 1.5))
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        "No dynamic loss scale: this run had no fp16 loss scaler (fp32 or bf16).",
        ha="center",
        va="center",
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ranks_figure(steps: pd.DataFrame, summary: RunSummary, path: str | Path) -> dict[str, Any]:
    """Who waits for whom: each rank's median compute, communication and wait per optimizer step as stacked
    bars (the run summary's rank balance), and each rank's wait per timed step (rank_balance.rank_times). A
    run whose records cannot say (RankBalance.problems) gets the reasons instead. Returns what it drew."""
    balance = summary.rank_balance
    if not balance.measured:
        fig, ax = plt.subplots(figsize=(9, 1.8))
        ax.axis("off")
        ax.text(
            0.5,
            0.5,
            "Compute and wait per rank not measured:\n" + "\n".join(balance.problems),
            ha="center",
            va="center",
            wrap=True,
        )
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return {"ranks_measured": False, "problems": balance.problems}
    fig, (ax_bar, ax_wait) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.4]})
    ranks = balance.ranks
    labels = [f"rank {rank}" + (" (straggler)" if rank == balance.straggler else "") for rank in ranks]
    bottom = [0.0] * len(ranks)
    parts = (
        ("compute", balance.compute, "C0"),
        ("communication", {r: balance.communication for r in ranks}, "C7"),
        ("wait for the others", balance.wait, "C3"),
    )
    for name, values, color in parts:
        heights = [values[rank] for rank in ranks]
        ax_bar.bar(labels, heights, bottom=bottom, color=color, label=f"{name} (median)")
        bottom = [a + b for a, b in zip(bottom, heights)]
    ax_bar.set_ylim(0, 1.45 * max(bottom))  # room for the legend above the bars
    ax_bar.set(ylabel="s per optimizer step (medians)", title="Compute vs wait per rank")
    ax_bar.legend(loc="upper center", fontsize="small", ncol=1)
    times = rank_times(steps, summary.warmup_steps_excluded)
    sns.lineplot(
        data=times.assign(rank=times["rank"].astype(str)),
        x="step",
        y=WAIT,
        hue="rank",
        ax=ax_wait,
        linewidth=0.9,
    )
    ax_wait.set(
        xlabel="optimizer step (timed steps)", ylabel="wait for the other ranks (s)", title="Wait per step"
    )
    ax_wait.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {
        "ranks_measured": True,
        "straggler_rank": balance.straggler,
        "compute_median(s)": balance.compute,
        "wait_median(s)": balance.wait,
    }


def variant_loss_figure(curves: dict[str, pd.DataFrame], path: str | Path) -> dict[str, Any]:
    """Every trained variant's loss curve (measures.loss_series of its records) overlaid, one colour each:
    ZeRO's stages and their peers on the same model, data and seed. Returns each curve's last loss."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    last: dict[str, float] = {}
    for index, (name, steps) in enumerate(curves.items()):
        loss = measures.loss_series(steps)
        peer = not name.startswith("zero")
        ax.plot(
            loss.index,
            loss.to_numpy(),
            color=f"C{index % 10}",
            linewidth=1.6 if peer else 1.0,
            linestyle="--" if peer else "-",
            label=name,
        )
        last[name] = float(loss.iloc[-1]) if len(loss) else float("nan")
    if not curves:
        ax.text(0.5, 0.5, "no variant trained", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(loc="upper right", fontsize="small", ncol=2)
    ax.set(
        xlabel="optimizer step",
        ylabel="training loss (nats/token)",
        title="Loss per variant (same model, data and seed; peers dashed)",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"final_loss": last}
