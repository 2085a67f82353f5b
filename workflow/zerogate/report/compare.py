"""Several runs side by side, from their run registries: machines compared on the same measurement.

Runs are grouped by what they measured: the same profile, the same measurement hash (the resolved profile
and the pipeline version, without the keys that only set how many runs are made and how their uncertainty
is estimated, or that inject a fault on purpose: zerogate.config.profile.measured_profile) and the same
dataset hash. A run with a fault injection is grouped with the runs it disturbs and marked so. Within a group
the machines stand side by side, each
number with its ratio to a reference machine (``compare_reference`` in the config; by default the
group's first machine in alphabetical order), and their loss and step-time curves are overlaid. A run
that shares its group with no other run is listed apart with the one reason it is not comparable.

Every number is read from the registries' ``summary`` (zerogate.contracts.report.RunStatistics, made by
zerogate.analysis.measures.run_statistics: the same definitions as each run's report); the curves are
measures.loss_series and measures.step_time_per_step.

Noise: each timing statistic (TIMING_STATISTICS) stands with its interval, and its ratio to the
reference with the ratio's interval: both runs resampled on their own (timing_replicates over
each run's steps and repeats, with the run's own interval settings) and the replicates divided
(measures.ratio_interval). A ratio is **beyond noise** when its interval excludes 1. The other quantities
(losses, counts, memory) have no interval here, so they say nothing about noise (``beyond_noise`` empty).

History: the runs of one machine (its host name) and profile across pipeline versions, ordered by when
they trained, each run's median optimizer step with its interval and its ratio to the run before it
(beyond noise or not): a regression shows up as a ratio whose interval lies above 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from zerogate.analysis import intervals, measures  # noqa: E402
from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.intervals import TIMING_STATISTICS, IntervalRule, TimingReplicates
from zerogate.analysis.parse import read_steps as read_steps_table  # noqa: E402
from zerogate.contracts.base import ContractError  # noqa: E402
from zerogate.contracts.report import RunRegistry, RunStatistics  # noqa: E402
from zerogate.errors import InputError  # noqa: E402
from zerogate.report.html import environment, fmt, image  # noqa: E402

# What two runs must share to have measured the same thing, read from each registry.
GROUP_BY: dict[str, Any] = {
    "profile": lambda registry: registry.profile,
    "measurement hash": lambda registry: registry.provenance.measurement_hash,
    "dataset hash": lambda registry: registry.provenance.dataset_sha256,
}
# The run statistics a group compares (RunStatistics field -> label; the unit is in the field's key).
QUANTITIES: dict[str, str] = {
    "step_time_median_s": "median optimizer-step time, slowest rank",
    "step_time_p90_s": "p90 optimizer-step time, slowest rank",
    "micro_step_time_median_s": "median micro-step time, slowest rank",
    "tokens_per_s": "tokens/s, all ranks",
    "final_loss": "final loss",
    "loss_spikes": "loss spikes",
    "overflow_skipped_steps": "fp16-overflow-skipped steps, worst rank",
    "failed_ranks": "failed ranks",
    "wait_for_straggler_median_s": "median wait for the straggler per step, longest-waiting rank",
}


@dataclass(frozen=True)
class Run:
    """One run's registry as found on disk (``registry`` None when it is of another registry version: then
    ``problem`` says why it cannot be compared), and the machine it is shown under."""

    directory: Path
    registry: RunRegistry | None
    machine: str
    problem: str | None = None

    @property
    def run_id(self) -> str:
        return self.registry.run_id if self.registry else self.directory.name

    @property
    def profile(self) -> str:
        return self.registry.profile if self.registry else "?"

    @property
    def provenance(self) -> Any:
        return self.registry.provenance if self.registry else None

    def statistic(self, name: str) -> Any:
        summary = self.registry.summary if self.registry else None
        return None if summary is None else getattr(summary, name)

    def interval(self, name: str) -> Any:
        summary = self.registry.summary if self.registry else None
        return None if summary is None else summary.interval_of(name)

    @property
    def commit(self) -> str | None:
        git = self.registry.provenance.git.at_training if self.registry else None
        return git.commit if git else None

    @property
    def host(self) -> str | None:
        return self.registry.provenance.machine.hostname if self.registry else None


def load_run(run_dir: str | Path) -> Run:
    """A run's registry, with its paths resolved against the results tree it sits in."""
    run_dir = Path(run_dir)
    path = run_dir if run_dir.suffix == ".json" else run_dir / "registry.json"
    if not path.is_file():
        raise InputError(
            str(path), "", "no run registry (run the pipeline for that profile and machine first)"
        )
    try:
        registry = RunRegistry.read(path)
    except ContractError as error:
        if error.key != "contract":
            raise
        # An older pipeline's registry: shown apart with how to rebuild it, never read field by field.
        return Run(
            path.parent,
            None,
            path.parent.name,
            f"{error.problem} (rebuild it: snakemake --cores all -R register_run)",
        )
    return Run(path.parent, registry, registry.machine)


def _local(run: Run, recorded: str) -> Path:
    """A recorded path (relative to the repository that made it: results/<profile>/<machine>/...) read
    beside this registry, so that copied-in results work."""
    marker = f"{run.registry.profile}/{run.registry.machine}/"
    return run.directory / recorded.split(marker, 1)[-1] if marker in recorded else Path(recorded)


def read_steps(run: Run) -> pd.DataFrame:
    return read_steps_table(_local(run, run.registry.files.steps))


_TIMINGS: dict[tuple[Path, str], Any] = {}


def timings(run: Run) -> TimingReplicates | None:
    """The run's timing statistics with their bootstrap replicates, from its steps and its repeats' (the
    registry's files) under the interval settings its summary records; None without them."""
    summary = run.registry.summary if run.registry else None
    if summary is None or summary.intervals is None:
        return None
    key = (run.directory, run.registry.registered_at)
    if key not in _TIMINGS:
        basis = summary.intervals
        rule = IntervalRule(basis.confidence, basis.resamples, basis.seed)
        tables = [read_steps(run)] + [
            read_steps_table(_local(run, path)) for path in run.registry.files.repeat_steps
        ]
        _TIMINGS[key] = timing_replicates(tables, summary.warmup_steps_excluded, rule)
    return _TIMINGS[key]


def ratio_with_noise(run: Run, reference: Run, name: str) -> dict[str, Any]:
    """Statistic ``name`` of ``run`` over the reference's: the ratio, its interval (timing statistics only)
    and whether it is beyond noise (the interval excludes 1; None without an interval)."""
    ratio = _ratio(run.statistic(name), reference.statistic(name))
    interval = None
    if name in TIMING_STATISTICS and ratio is not None:
        mine, theirs = timings(run), timings(reference)
        if mine is not None and theirs is not None and run.directory != reference.directory:
            interval = intervals.ratio_interval(mine, theirs, name)
    if run.directory == reference.directory and ratio is not None and name in TIMING_STATISTICS:
        return {"ratio": ratio, "ratio_interval": None, "beyond_noise": False}
    beyond = None if interval is None else not interval.contains(1.0)
    return {"ratio": ratio, "ratio_interval": interval, "beyond_noise": beyond}


def group_key(run: Run) -> tuple[Any, ...]:
    return tuple(value(run.registry) for value in GROUP_BY.values())


def _short(value: Any) -> str:
    return str(value)[:12] if value else "none"


@dataclass
class Group:
    """Runs that measured the same thing, one column per machine."""

    key: tuple[Any, ...]
    runs: list[Run]  # sorted by machine
    reference: str  # the machine the ratios divide by
    reference_note: str | None = None  # why it is not the machine the user asked for

    @property
    def machines(self) -> list[str]:
        return [run.machine for run in self.runs]

    @property
    def title(self) -> str:
        profile, measurement_hash, dataset_hash = self.key
        return f"profile {profile} · measurement {_short(measurement_hash)} · dataset {_short(dataset_hash)}"


@dataclass
class Straggler:
    """A run with no other run to compare it with, and the one reason why."""

    run: Run
    reason: str


@dataclass
class Comparison:
    groups: list[Group] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)


def _why_alone(run: Run, others: list[Run]) -> str:
    """The first of profile, config hash, dataset hash that no other run shares with ``run``."""
    if run.registry is None:
        return f"registry {run.problem}"
    same = [other for other in others if other.registry is not None]
    for name, value in GROUP_BY.items():
        narrower = [other for other in same if value(other.registry) == value(run.registry)]
        if not narrower:
            if name == "profile":
                return f"the only run of profile {run.profile}"
            theirs = sorted({_short(value(other.registry)) for other in same})
            return f"{name} {_short(value(run.registry))} differs from the other runs' ({', '.join(theirs)})"
        same = narrower
    return "no other run measured the same thing"  # unreachable: a run alone in its group differs somewhere


def _deduplicated(runs: list[Run]) -> list[Run]:
    """The same machine twice in a group (copied results): tell them apart by their directory."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.machine] = seen.get(run.machine, 0) + 1
    return [
        Run(run.directory, run.registry, f"{run.machine} ({run.directory})", run.problem)
        if seen[run.machine] > 1
        else run
        for run in runs
    ]


def group_runs(runs: list[Run], reference: str | None = None) -> Comparison:
    """Groups of comparable runs (two or more) and the runs left alone, each with its reason."""
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for index, run in enumerate(runs):
        if run.registry is not None:
            by_key.setdefault(group_key(run), []).append(index)
    comparison = Comparison()
    grouped: set[int] = set()
    for key, indices in by_key.items():
        if len(indices) < 2:
            continue
        grouped.update(indices)
        members = sorted(_deduplicated([runs[i] for i in indices]), key=lambda run: run.machine)
        machines = [run.machine for run in members]
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


def _peaks(run: Run) -> dict[int, float]:
    return dict(run.statistic("peak_memory_per_rank_gib") or {})


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

    def add(label: str, unit: str, value_of, name: str | None = None) -> None:
        ref_value = value_of(reference)
        cells = {}
        for run in group.runs:
            value = value_of(run)
            cell = {
                "value": value,
                "ratio": _ratio(value, ref_value),
                "interval": None,
                "ratio_interval": None,
                "beyond_noise": None,
            }
            if name is not None:
                cell.update(ratio_with_noise(run, reference, name), interval=run.interval(name))
            cells[run.machine] = cell
        rows.append({"label": label, "unit": unit, "cells": cells, "statistic": name})

    for name, label in QUANTITIES.items():
        add(label, _unit(name), lambda run, name=name: run.statistic(name), name)
    ranks = sorted({rank for run in group.runs for rank in _peaks(run)})
    for rank in ranks:
        add(f"peak memory, rank {rank}", "GiB", lambda run, rank=rank: _peaks(run).get(rank))
    return rows


def _unit(name: str) -> str:
    """The unit of RunStatistics field ``name``, from its key (``step_time_median(s)``: s)."""
    key = RunStatistics.key(name)
    return key[key.rindex("(") + 1 : -1] if key.endswith(")") else ""


def gate_rows(group: Group) -> list[dict[str, Any]]:
    """Gate verdicts of the group: one row per gate, one verdict per machine."""
    names = list(dict.fromkeys(gate.name for run in group.runs for gate in run.registry.gates))
    verdicts = {run.machine: {gate.name: gate.verdict for gate in run.registry.gates} for run in group.runs}
    return [
        {"gate": name, "verdicts": {machine: verdicts[machine].get(name) for machine in group.machines}}
        for name in names
    ]


def _column(name: str, label: str) -> str:
    return f"{label} ({_unit(name)})" if _unit(name) else label


# The CSV's columns: one row per (run, statistic) in a group, one per gate verdict, one per run not
# comparable.
TABLE_COLUMNS = [
    "group",
    "comparable",
    "not comparable because",
    "machine",
    "run id",
    "profile",
    "config hash",
    "fault injection",
    "dataset hash",
    "DeepSpeed config hash",
    "reference machine",
    "statistic",
    "unit",
    "value",
    "low",
    "high",
    "reference value",
    "ratio",
    "ratio low",
    "ratio high",
    "beyond_noise",
    "noise basis",
    "gate",
    "verdict",
]
NOISE_BASIS = {True: "interval of the ratio (both runs bootstrapped)", False: "no interval for this quantity"}


def comparison_table(comparison: Comparison) -> pd.DataFrame:
    """The CSV, long: per group, one row per run and compared quantity (its value and interval, the
    reference's value, the ratio with its interval and ``beyond_noise``: true or false on every row of a
    timing statistic with an interval, empty where the quantity has none), then one row per run and gate
    (its verdict); then each run not comparable with its reason."""
    rows = []
    for number, group in enumerate(comparison.groups, start=1):
        reference = group.runs[group.machines.index(group.reference)]
        base = {"group": number, "comparable": True, "reference machine": group.reference}
        for quantity in quantity_rows(group):
            for run in group.runs:
                cell, ref = quantity["cells"][run.machine], quantity["cells"][reference.machine]
                interval, ratio_interval = cell["interval"], cell["ratio_interval"]
                noisy = cell["beyond_noise"] is not None
                rows.append(
                    base
                    | _run_columns(run)
                    | {
                        "statistic": quantity["label"],
                        "unit": quantity["unit"],
                        "value": cell["value"],
                        "low": interval.low if interval else None,
                        "high": interval.high if interval else None,
                        "reference value": ref["value"],
                        "ratio": cell["ratio"],
                        "ratio low": ratio_interval.low if ratio_interval else None,
                        "ratio high": ratio_interval.high if ratio_interval else None,
                        "beyond_noise": cell["beyond_noise"],
                        "noise basis": NOISE_BASIS[noisy],
                    }
                )
        for gate in gate_rows(group):
            for run in group.runs:
                rows.append(
                    base
                    | _run_columns(run)
                    | {"gate": gate["gate"], "verdict": gate["verdicts"][run.machine]}
                )
    for straggler in comparison.stragglers:
        rows.append(
            {"group": None, "comparable": False, "not comparable because": straggler.reason}
            | _run_columns(straggler.run)
        )
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"group": "Int64", "beyond_noise": "boolean"})
    return table


def _run_columns(run: Run) -> dict[str, Any]:
    registry = run.registry
    return {
        "machine": run.machine,
        "run id": run.run_id,
        "profile": run.profile,
        "config hash": registry.provenance.config_hash if registry else None,
        "fault injection": _injection(run),
        "dataset hash": registry.provenance.dataset_sha256 if registry else None,
        "DeepSpeed config hash": registry.provenance.ds_config_sha256 if registry else None,
    }


def _injection(run: Run) -> str | None:
    """The run's fault injection in words (stabiliser.inject), None without one."""
    inject = run.registry.provenance.fault_injection if run.registry else None
    return None if not inject else ", ".join(f"{key} {value}" for key, value in inject.items())


def noise_summary(group: Group) -> dict[str, Any]:
    """Which machines differ from the reference beyond noise, statistic by statistic (timing statistics)."""
    beyond: dict[str, list[str]] = {}
    judged = 0
    for row in quantity_rows(group):
        for machine, cell in row["cells"].items():
            if machine == group.reference or cell["beyond_noise"] is None:
                continue
            judged += 1
            if cell["beyond_noise"]:
                beyond.setdefault(machine, []).append(row["label"])
    return {"beyond": beyond, "judged": judged}


@dataclass
class History:
    """The runs of one machine and profile across pipeline versions, in the order they trained."""

    profile: str
    host: str
    runs: list[Run]

    @property
    def title(self) -> str:
        return f"profile {self.profile} on host {self.host}"


HISTORY_STATISTIC = "step_time_median_s"


def histories(runs: list[Run]) -> list[History]:
    """Per (profile, host name): the runs of two or more git commits, oldest training first; a run with a
    fault injection is no point of a history (it measures the fault, not the version)."""
    by_key: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        if run.registry is not None and run.host and not run.registry.provenance.fault_injection:
            by_key.setdefault((run.profile, run.host), []).append(run)
    found = []
    for (profile, host), members in by_key.items():
        if len({run.commit for run in members}) < 2:
            continue
        members = sorted(members, key=lambda run: run.registry.provenance.recorded_at)
        found.append(History(profile, host, members))
    return found


def history_rows(history: History) -> list[dict[str, Any]]:
    """Each run's median optimizer step with its interval, and its ratio to the run before (with the
    ratio's interval and whether it is beyond noise)."""
    rows, before = [], None
    for run in history.runs:
        git = run.registry.provenance.git.at_training
        row = {
            "run": run,
            "commit": (git.commit[:10] + (" (uncommitted changes)" if git.dirty else "")) if git else "—",
            "recorded_at": run.registry.provenance.recorded_at,
            "config_hash": run.registry.provenance.config_hash,
            "value": run.statistic(HISTORY_STATISTIC),
            "interval": run.interval(HISTORY_STATISTIC),
            "ratio": None,
            "ratio_interval": None,
            "beyond_noise": None,
        }
        if before is not None:
            row.update(ratio_with_noise(run, before, HISTORY_STATISTIC))
        rows.append(row)
        before = run
    return rows


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
            injection=_injection,
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
