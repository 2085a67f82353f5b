"""Seaborn figures of a run: loss, step time and memory per rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from zerogate.analysis.gates import GB, GIB, smooth  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")


def _gate(verdicts: dict[str, Any], metric_prefix: str) -> dict[str, Any] | None:
    return next((g for g in verdicts["gates"] if g["metric"].startswith(metric_prefix)), None)


def loss_figure(steps: pd.DataFrame, events: pd.DataFrame, warmup_steps: int, path: str | Path,
                stabiliser: pd.DataFrame | None = None) -> None:
    """Loss raw and smoothed; launcher events (overflow, crash) as dotted lines and, when given, the
    training loop's stabiliser events (rows with step, rank, kind, value, action) as markers."""
    rank0 = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(rank0["step"], rank0["loss"], color="0.7", linewidth=0.8, label="loss (mean over accumulation and ranks)")
    ax.plot(rank0["step"], smooth(rank0["loss"].reset_index(drop=True)).to_numpy(), color="C0", linewidth=2,
            label="smoothed (rolling median)")
    if warmup_steps:
        ax.axvspan(0, warmup_steps, color="C1", alpha=0.12, label=f"warm-up ({warmup_steps} steps)")
    marked = events[events["step"].notna() & events["kind"].isin(["overflow", "traceback", "fatal_loss_scale"])] if len(events) else events
    for step in marked["step"].dropna().unique() if len(marked) else []:
        ax.axvline(int(step), color="C3", linestyle=":", linewidth=1)
    if len(marked):
        ax.plot([], [], color="C3", linestyle=":", label="overflow / crash in the launcher log")
    if stabiliser is not None and len(stabiliser):
        at = rank0.set_index("step")["loss"]
        for (kind, action), group in stabiliser.groupby(["kind", "action"], dropna=False):
            shown = group[group["step"].isin(at.index)]
            ax.scatter(shown["step"], at.loc[shown["step"]].to_numpy(), marker="v", s=36, zorder=3,
                       label=f"stabiliser: {kind} -> {action} ({len(group)})")
    ax.set(xlabel="optimizer step", ylabel="training loss (nats/token)", title="Loss")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def step_time_figure(steps: pd.DataFrame, warmup_steps: int, verdicts: dict[str, Any], path: str | Path) -> None:
    fig, (ax_line, ax_hist) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    data = steps.assign(rank=steps["rank"].astype(str))
    sns.lineplot(data=data, x="step", y="step_time(s)", hue="rank", ax=ax_line, linewidth=0.8)
    timed = data[data["step"] > warmup_steps]
    sns.histplot(data=timed, x="step_time(s)", hue="rank", ax=ax_hist, bins=40, element="step")
    gate = _gate(verdicts, "step_time")
    if gate is not None:
        for ax, line in ((ax_line, ax_line.axhline), (ax_hist, ax_hist.axvline)):
            line(gate["threshold"], color="C3", linestyle="--", label=f"claim {gate['threshold']:g} s")
        ax_line.legend(title="rank")
    ax_line.set(xlabel="optimizer step", ylabel="optimizer-step wall time (s)", title="Step time per rank")
    ax_hist.set(xlabel="optimizer-step wall time (s), after warm-up", ylabel="steps", title="Distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory_figure(steps: pd.DataFrame, verdicts: dict[str, Any], path: str | Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    data = steps.assign(rank=steps["rank"].astype(str))
    sns.lineplot(data=data, x="step", y="memory/device_peak(GiB)", hue="rank", ax=ax)
    source = ", ".join(sorted(steps.get("memory/device_peak_source", pd.Series(dtype=str)).dropna().unique()))
    gate = _gate(verdicts, "memory/")
    if gate is not None:
        threshold_gib = gate["threshold"] * (GB / GIB if gate["unit"] == "GB" else 1.0)
        ax.axhline(threshold_gib, color="C3", linestyle="--",
                   label=f"claim {gate['threshold']:g} {gate['unit']} = {threshold_gib:.2f} GiB")
        ax.legend(title="rank")
    ax.set(xlabel="optimizer step", ylabel="peak memory per step (GiB)", title=f"Memory per rank ({source})")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def loss_scale_series(steps: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame | None:
    """The fp16 loss scale per step: from the records' ``loss_scale`` column, else from the launcher's
    overflow lines (the scale after each reduction). None for runs without a loss scaler (fp32, bf16)."""
    if "loss_scale" in steps.columns and steps["loss_scale"].notna().any():
        first = steps[steps["rank"] == steps["rank"].min()]
        return first[["step", "loss_scale"]].dropna()
    if not len(events):
        return None
    changes = events[events["kind"].isin(["overflow", "loss_scale_reduced"])]
    rows = [{"step": s, "loss_scale": json.loads(d).get("new")} for s, d in zip(changes["step"], changes["detail"])]
    rows = [r for r in rows if r["loss_scale"] is not None and not pd.isna(r["step"])]
    return pd.DataFrame(rows) if rows else None


def loss_scale_figure(series: pd.DataFrame, path: str | Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.step(series["step"], series["loss_scale"], where="post", color="C2")
    ax.set_yscale("log", base=2)
    ax.set(xlabel="optimizer step", ylabel="fp16 loss scale (log2 axis)", title="Dynamic loss scale")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def no_loss_scale_figure(path: str | Path) -> None:
    """Stands in for the loss-scale figure of a run without a loss scaler (Snakemake needs the file)."""
    fig, ax = plt.subplots(figsize=(9, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, "No dynamic loss scale: this run had no fp16 loss scaler (fp32 or bf16).", ha="center", va="center")
    fig.savefig(path, dpi=110)
    plt.close(fig)
