"""Several runs side by side, from their run registries: machines compared on the same measurement.

Runs are grouped by what they measured: the same profile, the same measurement hash (the resolved profile
and the pipeline version, without the keys that only set how many runs are made and how their uncertainty
is estimated, or that inject a fault on purpose: zerogate.config.profile.measured_profile) and the same
dataset hash. A run with a fault injection is grouped with the runs it disturbs and marked so. Within a group
the machines stand side by side, each number with its ratio to a reference machine (``compare_reference``
in the config; by default the group's first machine in alphabetical order). A run that shares its group
with no other run is listed apart with the one reason it is not comparable.

Every number is read from the registries' ``summary`` (zerogate.contracts.summary.RunStatistics, the run
summary's statistics: the same definitions as each run's report).

Noise: each timing statistic (zerogate.analysis.intervals.TIMING_STATISTICS) stands with its interval, and
its ratio to the reference with the ratio's interval: both runs' bootstrap replicates (each run's summary,
``summary/run.json`` beside its registry: its steps and repeats resampled under its own interval settings)
divided (zerogate.analysis.intervals.ratio_interval). A ratio is **beyond noise** when its interval excludes
1. The other quantities (losses, counts, memory) have no interval here, so they say nothing about noise
(``beyond_noise`` empty).

History: the runs of one machine (its host name) and profile across pipeline versions, ordered by when
they trained, each run's median optimizer step with its interval and its ratio to the run before it
(beyond noise or not): a regression shows up as a ratio whose interval lies above 1.

zerogate.analysis.compare_table writes the comparison as the CSV; zerogate.report.compare draws and renders
it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis.intervals import TIMING_STATISTICS, TimingReplicates, ratio_interval
from zerogate.analysis.parse import read_steps as read_steps_table
from zerogate.contracts.base import ContractError
from zerogate.contracts.report import RunRegistry
from zerogate.contracts.summary import RunStatistics, RunSummary
from zerogate.errors import InputError

# A run's summary (rule summarise_run) beside its registry: the bootstrap replicates the ratios are read from.
SUMMARY_FILE = Path("summary") / "run.json"

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
    ``problem`` says why it cannot be compared), the machine it is shown under, and its run summary (the
    summary/run.json beside the registry)."""

    directory: Path
    registry: RunRegistry | None
    machine: str
    problem: str | None = None
    run_summary: RunSummary | None = None

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
    summary = path.parent / SUMMARY_FILE
    if not summary.is_file():
        raise InputError(
            str(summary),
            "",
            "no run summary beside the registry (make it: snakemake --cores all --config "
            f"profile={registry.profile} machine={registry.machine} -- {summary})",
        )
    return Run(path.parent, registry, registry.machine, run_summary=RunSummary.read(summary))


def _local(run: Run, recorded: str) -> Path:
    """A recorded path (relative to the repository that made it: results/<profile>/<machine>/...) read
    beside this registry, so that copied-in results work."""
    marker = f"{run.registry.profile}/{run.registry.machine}/"
    return run.directory / recorded.split(marker, 1)[-1] if marker in recorded else Path(recorded)


def read_steps(run: Run) -> pd.DataFrame:
    return read_steps_table(_local(run, run.registry.files.steps))


def timings(run: Run) -> TimingReplicates | None:
    """The run's timing statistics with their bootstrap replicates (its run summary's, under the interval
    settings it was drawn with); None when its statistics carry no interval."""
    summary = run.registry.summary if run.registry else None
    if summary is None or summary.intervals is None or run.run_summary is None:
        return None
    return TimingReplicates.of_summary(run.run_summary)


def ratio_with_noise(run: Run, reference: Run, name: str) -> dict[str, Any]:
    """Statistic ``name`` of ``run`` over the reference's: the ratio, its interval (timing statistics only)
    and whether it is beyond noise (the interval excludes 1; None without an interval)."""
    ratio = _ratio(run.statistic(name), reference.statistic(name))
    interval = None
    if name in TIMING_STATISTICS and ratio is not None:
        mine, theirs = timings(run), timings(reference)
        if mine is not None and theirs is not None and run.directory != reference.directory:
            interval = ratio_interval(mine, theirs, name)
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
        Run(run.directory, run.registry, f"{run.machine} ({run.directory})", run.problem, run.run_summary)
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


def injection_of(run: Run) -> str | None:
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
