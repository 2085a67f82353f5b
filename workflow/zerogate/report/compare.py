"""Several runs side by side, from their run registries: machines compared on the same measurement.

Runs are grouped by what they measured: the same profile, the same config hash (the resolved profile and
the pipeline version) and the same dataset hash. Within a group the machines stand side by side, each
number with its ratio to a reference machine (``compare_reference`` in the config; by default the
group's first machine in alphabetical order), and their loss and step-time curves are overlaid. A run
that shares its group with no other run is listed apart with the one reason it is not comparable.

Every number is read from the registries' ``summary`` (zerogate.analysis.measures.run_statistics, the
same definitions as each run's report); the curves are measures.loss_series and measures.step_time_per_step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from zerogate.analysis import measures  # noqa: E402
from zerogate.errors import InputError  # noqa: E402
from zerogate.report.html import environment, fmt, image  # noqa: E402
from zerogate.report.registry import SCHEMA  # noqa: E402

# What two runs must share to have measured the same thing, and where the registry holds it.
GROUP_BY: dict[str, tuple[str, ...]] = {
    "profile": ("profile",),
    "config hash": ("provenance", "config_hash"),
    "dataset hash": ("provenance", "dataset_sha256"),
}
# The registry summary's numbers a group compares (key -> label; the unit is in the key).
QUANTITIES: dict[str, str] = {
    "step_time_median(s)": "median optimizer-step time, slowest rank",
    "step_time_p90(s)": "p90 optimizer-step time, slowest rank",
    "micro_step_time_median(s)": "median micro-step time, slowest rank",
    "tokens_per_s": "tokens/s, all ranks",
    "final_loss": "final loss",
    "loss_spikes": "loss spikes",
    "overflow_skipped_steps": "fp16-overflow-skipped steps, worst rank",
    "failed_ranks": "failed ranks",
    "wait_for_straggler_median(s)": "median wait for the straggler per step, longest-waiting rank",
}
PEAK_MEMORY = "peak_memory_per_rank(GiB)"


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        record = record.get(key, {}) if isinstance(record, dict) else {}
    return record or None


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """A run's registry, with its paths resolved against the results tree it sits in."""
    run_dir = Path(run_dir)
    path = run_dir if run_dir.suffix == ".json" else run_dir / "registry.json"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(str(path), "", "no run registry (run the pipeline for that profile and machine first)") from None
    except json.JSONDecodeError as error:
        raise InputError(str(path), "", f"not valid JSON ({error.msg})") from None
    for key in ("run_id", "profile", "machine", "gates", "provenance", "files"):
        if key not in record:
            raise InputError(str(path), key, "missing (not a zerogate run registry?)")
    # Files are recorded relative to the repository that made them: results/<profile>/<machine>/...;
    # read them beside this registry so that copied-in results work.
    record["_dir"] = str(path.parent)
    return record


def _local(record: dict[str, Any], recorded: str) -> Path:
    marker = f"{record['profile']}/{record['machine']}/"
    return Path(record["_dir"]) / recorded.split(marker, 1)[-1] if marker in recorded else Path(recorded)


def read_steps(record: dict[str, Any]) -> pd.DataFrame:
    return pd.read_parquet(_local(record, record["files"]["steps"]))


def group_key(run: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_get(run, path) for path in GROUP_BY.values())


def _short(value: Any) -> str:
    return str(value)[:12] if value else "none"


@dataclass
class Group:
    """Runs that measured the same thing, one column per machine."""

    key: tuple[Any, ...]
    runs: list[dict[str, Any]]  # sorted by machine
    reference: str  # the machine the ratios divide by
    reference_note: str | None = None  # why it is not the machine the user asked for

    @property
    def machines(self) -> list[str]:
        return [run["machine"] for run in self.runs]

    @property
    def title(self) -> str:
        profile, config_hash, dataset_hash = self.key
        return f"profile {profile} · config {_short(config_hash)} · dataset {_short(dataset_hash)}"


@dataclass
class Straggler:
    """A run with no other run to compare it with, and the one reason why."""

    run: dict[str, Any]
    reason: str


@dataclass
class Comparison:
    groups: list[Group] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)


def _why_alone(run: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """The first of profile, config hash, dataset hash that no other run shares with ``run``."""
    if run.get("schema") != SCHEMA:
        return (f"registry schema {run.get('schema')!r}, not {SCHEMA!r}: its summary cannot be read "
                "(rebuild it: snakemake --cores all -R register_run)")
    same = [other for other in others if other.get("schema") == SCHEMA]
    for name, path in GROUP_BY.items():
        narrower = [other for other in same if _get(other, path) == _get(run, path)]
        if not narrower:
            if name == "profile":
                return f"the only run of profile {run['profile']}"
            theirs = sorted({_short(_get(other, path)) for other in same})
            return f"{name} {_short(_get(run, path))} differs from the other runs' ({', '.join(theirs)})"
        same = narrower
    return "no other run measured the same thing"  # unreachable: a run alone in its group differs somewhere


def _deduplicated(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same machine twice in a group (copied results): tell them apart by their directory."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run["machine"]] = seen.get(run["machine"], 0) + 1
    return [{**run, "machine": f"{run['machine']} ({run['_dir']})"} if seen[run["machine"]] > 1 else run
            for run in runs]


def group_runs(runs: list[dict[str, Any]], reference: str | None = None) -> Comparison:
    """Groups of comparable runs (two or more) and the runs left alone, each with its reason."""
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for index, run in enumerate(runs):
        if run.get("schema") == SCHEMA:
            by_key.setdefault(group_key(run), []).append(index)
    comparison = Comparison()
    grouped: set[int] = set()
    for key, indices in by_key.items():
        if len(indices) < 2:
            continue
        grouped.update(indices)
        members = sorted(_deduplicated([runs[i] for i in indices]), key=lambda run: run["machine"])
        machines = [run["machine"] for run in members]
        chosen, note = machines[0], None
        if reference in machines:
            chosen = reference
        elif reference:
            note = f"compare_reference {reference!r} is not in this group, so the first machine is"
        comparison.groups.append(Group(key, members, chosen, note))
    for index, run in enumerate(runs):
        if index not in grouped:
            others = [other for i, other in enumerate(runs) if i != index]
            comparison.stragglers.append(Straggler(run, _why_alone(run, others)))
    return comparison


def _peaks(run: dict[str, Any]) -> dict[int, float]:
    return {int(rank): value for rank, value in (run.get("summary", {}).get(PEAK_MEMORY) or {}).items()}


def _ratio(value: Any, reference: Any) -> float | None:
    if isinstance(value, bool) or isinstance(reference, bool):
        return None
    if not isinstance(value, (int, float)) or not isinstance(reference, (int, float)) or not reference:
        return None
    return float(value) / float(reference)


def quantity_rows(group: Group) -> list[dict[str, Any]]:
    """One row per quantity: label, unit, and per machine its value and its ratio to the reference."""
    reference = group.runs[group.machines.index(group.reference)]
    rows = []

    def add(label: str, unit: str, value_of) -> None:
        ref_value = value_of(reference)
        cells = {}
        for run in group.runs:
            value = value_of(run)
            cells[run["machine"]] = {"value": value, "ratio": _ratio(value, ref_value)}
        rows.append({"label": label, "unit": unit, "cells": cells})

    for key, label in QUANTITIES.items():
        add(label, _unit(key), lambda run, key=key: run.get("summary", {}).get(key))
    ranks = sorted({rank for run in group.runs for rank in _peaks(run)})
    for rank in ranks:
        add(f"peak memory, rank {rank}", "GiB", lambda run, rank=rank: _peaks(run).get(rank))
    return rows


def _unit(key: str) -> str:
    return key[key.rindex("(") + 1:-1] if key.endswith(")") else ""


def gate_rows(group: Group) -> list[dict[str, Any]]:
    """Gate verdicts of the group: one row per gate, one verdict per machine."""
    names = list(dict.fromkeys(gate["name"] for run in group.runs for gate in run["gates"]))
    verdicts = {run["machine"]: {gate["name"]: gate["verdict"] for gate in run["gates"]} for run in group.runs}
    return [{"gate": name, "verdicts": {machine: verdicts[machine].get(name) for machine in group.machines}}
            for name in names]


def comparison_table(comparison: Comparison) -> pd.DataFrame:
    """The CSV: one row per run, the grouped runs first (group, reference, each quantity and its ratio to
    the reference, peak memory one column per rank, gate verdicts), then the runs not comparable with
    their reason."""
    rows = []
    for number, group in enumerate(comparison.groups, start=1):
        reference = group.runs[group.machines.index(group.reference)]
        for run in group.runs:
            row = {"group": number, "comparable": True, "not comparable because": None,
                   "reference machine": group.reference} | _run_columns(run)
            for key, label in QUANTITIES.items():
                column = f"{label} ({_unit(key)})" if _unit(key) else label
                row[f"{column} / reference"] = _ratio(run.get("summary", {}).get(key), reference.get("summary", {}).get(key))
            rows.append(row)
    for straggler in comparison.stragglers:
        rows.append({"group": None, "comparable": False, "not comparable because": straggler.reason,
                     "reference machine": None} | _run_columns(straggler.run))
    return pd.DataFrame(rows).astype({"group": "Int64"})


def _run_columns(run: dict[str, Any]) -> dict[str, Any]:
    summary = run.get("summary", {})
    row = {"machine": run["machine"], "run id": run["run_id"], "profile": run["profile"],
           "config hash": _get(run, GROUP_BY["config hash"]), "dataset hash": _get(run, GROUP_BY["dataset hash"]),
           "DeepSpeed config hash": _get(run, ("provenance", "ds_config_sha256"))}
    for key, label in QUANTITIES.items():
        row[f"{label} ({_unit(key)})" if _unit(key) else label] = summary.get(key)
    for rank, value in sorted(_peaks(run).items()):
        row[f"peak memory rank {rank} (GiB)"] = value
    row.update({f"gate {gate['name']}": gate["verdict"] for gate in run["gates"]})
    return row


def overlay_figure(comparison: Comparison, curve: str, ylabel: str, path: str | Path) -> None:
    """One panel per group, one curve per machine: ``curve`` is "loss" (measures.loss_series) or
    "step_time" (measures.step_time_per_step, the slowest rank at each step)."""
    series_of = {"loss": measures.loss_series, "step_time": measures.step_time_per_step}[curve]
    groups = comparison.groups
    fig, axes = plt.subplots(max(1, len(groups)), 1, figsize=(9, 3.8 * max(1, len(groups))), squeeze=False)
    if not groups:
        axes[0][0].axis("off")
        axes[0][0].text(0.5, 0.5, "No two runs measured the same thing: nothing to overlay.", ha="center", va="center")
    for ax, group in zip(axes[:, 0], groups):
        for run in group.runs:
            series = series_of(read_steps(run))
            style = {"linewidth": 1.8} if run["machine"] == group.reference else {"linewidth": 1.0}
            label = f"{run['machine']} (reference)" if run["machine"] == group.reference else run["machine"]
            ax.plot(series.index, series.to_numpy(), label=label, **style)
        ax.set(xlabel="optimizer step", ylabel=ylabel, title=group.title)
        ax.legend(title="machine", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_comparison(comparison: Comparison, figures: dict[str, str | Path], requested_reference: str | None = None) -> str:
    runs = len(comparison.stragglers) + sum(len(group.runs) for group in comparison.groups)
    return environment().get_template("comparison.html.j2").render(
        title=f"zerogate comparison of {runs} runs",
        comparison=comparison,
        groups=[{"number": number, "group": group, "quantities": quantity_rows(group), "gates": gate_rows(group)}
                for number, group in enumerate(comparison.groups, start=1)],
        requested_reference=requested_reference,
        group_by=list(GROUP_BY),
        images=[image(figures["loss"], "Training loss per optimizer step, one panel per group, one curve per machine"),
                image(figures["step_time"], "Optimizer-step wall time (slowest rank at each step), one panel per group, "
                                            "one curve per machine")],
        fmt=fmt,
    )
