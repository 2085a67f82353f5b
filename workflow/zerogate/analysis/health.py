"""Whether a run's records hold the whole run, and whether the run completed.

- Record completeness (counts, never the highest step): every rank of the world size (the run spec's)
  has records, each optimizer step 1..expected exactly once per rank (a resumed or rolled-back run's
  files hold every step once: zerogate.train.checkpoint), and no records of other ranks or steps.
  A statistic over a metric that is missing or non-finite at some step is NaN, never the statistic of
  the values that remain (``missing_values`` names the gaps).
- Fault (non-finite event): one per optimizer step at which any rank's records hold a non-finite loss
  or gradient norm, or the loss stabiliser caught one, whatever the policy and however many ranks saw
  it; the ranks are listed.
- Run completion: the run finished (it wrote its summary), and every rank recorded every optimizer
  step and neither raised, exited non-zero nor hit a fatal loss-scale error. The failed ranks are the
  ranks that did one of those; a run that stopped without saying which rank counts one unknown rank.
  Both the ``ranks_completed`` gate and the ``zero_nonfinite`` gate's completion check read this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from zerogate.analysis.columns import LOSS
from zerogate.contracts.parsed import Failure, RunMeta
from zerogate.contracts.summary import RecordCounts
from zerogate.contracts.verdicts import NonfiniteEventEvidence, RecordEvidence


class RecordCompleteness(RecordCounts):
    """Whether the step records hold the whole run, from counts (never from the highest step): every rank
    of the world size present, and each expected optimizer step exactly once per rank. The counts are the
    run summary's (RecordCounts); this adds what they mean."""

    @classmethod
    def of(cls, counts: RecordCounts) -> RecordCompleteness:
        """The counts as the run's summary holds them."""
        return cls.model_validate(counts.model_dump())

    def counts(self) -> RecordCounts:
        return RecordCounts.model_validate(self.model_dump())

    @property
    def incomplete_ranks(self) -> list[int]:
        return sorted(
            set(self.missing_ranks)
            | set(self.missing_steps)
            | set(self.repeated_steps)
            | set(self.unexpected_steps)
            | set(self.extra_ranks)
        )

    @property
    def problems(self) -> list[str]:
        found = []
        if self.world_size is None:
            found.append("world size unknown (no run spec or summary gives it): the ranks cannot be counted")
        if self.expected_steps is None:
            found.append("expected optimizer steps unknown: the steps cannot be counted")
        if self.missing_ranks:
            found.append(f"ranks with no step records: {self.missing_ranks} of world size {self.world_size}")
        if self.extra_ranks:
            found.append(f"records of ranks outside the world size {self.world_size}: {self.extra_ranks}")
        for label, table in (
            ("missing", self.missing_steps),
            ("recorded more than once", self.repeated_steps),
            ("outside 1..expected", self.unexpected_steps),
        ):
            for rank, listed in table.items():
                found.append(f"rank {rank}: {len(listed)} steps {label} ({step_span(listed)})")
        return found

    @property
    def complete(self) -> bool:
        return not self.problems

    def evidence(self) -> RecordEvidence:
        return RecordEvidence(
            world_size=self.world_size,
            expected_steps=self.expected_steps,
            ranks_present=self.ranks_present,
            missing_ranks=self.missing_ranks,
            extra_ranks=self.extra_ranks,
            steps_per_rank=self.steps_per_rank,
            missing_steps={r: step_span(v) for r, v in self.missing_steps.items()},
            repeated_steps={r: step_span(v) for r, v in self.repeated_steps.items()},
            unexpected_steps={r: step_span(v) for r, v in self.unexpected_steps.items()},
        )


def step_span(numbers: list[int], shown: int = 8) -> str:
    """Step numbers for a message: the first few, then how many more."""
    head = ", ".join(str(n) for n in numbers[:shown])
    return head + (f" and {len(numbers) - shown} more" if len(numbers) > shown else "")


def record_completeness(
    steps: pd.DataFrame, world_size: int | None, expected_steps: int | None
) -> RecordCompleteness:
    """Count the step records: which ranks of ``range(world_size)`` are present, and per rank which of the
    optimizer steps ``1..expected_steps`` are missing, recorded more than once, or not expected at all."""
    present = sorted(int(r) for r in steps["rank"].dropna().unique()) if len(steps) else []
    missing_ranks = [r for r in range(int(world_size))] if world_size else []
    missing_ranks = [r for r in missing_ranks if r not in present]
    missing: dict[int, list[int]] = {}
    repeated: dict[int, list[int]] = {}
    unexpected: dict[int, list[int]] = {}
    distinct: dict[int, int] = {}
    expected = set(range(1, int(expected_steps) + 1)) if expected_steps else None
    for rank in present:
        numbers = pd.to_numeric(steps.loc[steps["rank"] == rank, "step"], errors="coerce")
        counts = numbers.value_counts()
        seen = {int(n) for n in counts.index}
        distinct[rank] = len(seen)
        if expected is not None:
            if expected - seen:
                missing[rank] = sorted(expected - seen)
            if seen - expected:
                unexpected[rank] = sorted(seen - expected)
        if (counts > 1).any():
            repeated[rank] = sorted(int(n) for n in counts[counts > 1].index)
    extra = [r for r in present if world_size and not 0 <= r < int(world_size)]
    return RecordCompleteness(
        world_size=int(world_size) if world_size else None,
        expected_steps=int(expected_steps) if expected_steps else None,
        ranks_present=present,
        missing_ranks=missing_ranks,
        missing_steps=missing,
        repeated_steps=repeated,
        unexpected_steps=unexpected,
        extra_ranks=extra,
        steps_per_rank=distinct,
    )


def missing_values(steps: pd.DataFrame, metric: str) -> dict[int, list[int]]:
    """Per rank, the steps whose ``metric`` is missing (null) or non-finite (index: rank; empty when none)."""
    values = pd.to_numeric(steps[metric], errors="coerce").astype(float)
    bad = steps[~np.isfinite(values)]
    return {int(rank): sorted(int(s) for s in group["step"]) for rank, group in bad.groupby("rank")}


@dataclass(frozen=True)
class NonfiniteEvent:
    """One optimizer step at which some rank saw a non-finite loss or gradient norm."""

    step: int
    ranks: list[int]
    metrics: list[str]
    sources: list[str]

    def evidence(self) -> NonfiniteEventEvidence:
        return NonfiniteEventEvidence(
            step=self.step, ranks=self.ranks, metrics=self.metrics, sources=self.sources
        )


def nonfinite_events(
    steps: pd.DataFrame, metrics: list[str], caught: list[tuple[int, int | None, str]]
) -> list[NonfiniteEvent]:
    """Faults, one per optimizer step however many ranks saw it and whatever the stabiliser's policy:
    the steps whose records hold a non-finite value of ``metrics`` (a null loss was non-finite; a null
    gradient norm means DeepSpeed returned none), joined with the steps the loss stabiliser caught
    (``caught``: step, rank, kind; its rollback removes the bad step's record)."""
    found: dict[int, dict[str, set]] = {}

    def note(step: int, rank: int | None, metric: str, source: str) -> None:
        entry = found.setdefault(int(step), {"ranks": set(), "metrics": set(), "sources": set()})
        if rank is not None:
            entry["ranks"].add(int(rank))
        entry["metrics"].add(metric)
        entry["sources"].add(source)

    for metric in metrics:
        if metric not in steps.columns:
            continue
        values = pd.to_numeric(steps[metric], errors="coerce").astype(float)
        bad = ~np.isfinite(values) if metric == LOSS else (values.notna() & ~np.isfinite(values))
        for step, rank in zip(steps.loc[bad, "step"], steps.loc[bad, "rank"]):
            note(int(step), int(rank), metric, "step records")
    for step, rank, kind in caught:
        note(step, rank, kind.removeprefix("nonfinite_"), "loss stabiliser")
    return [
        NonfiniteEvent(step, sorted(e["ranks"]), sorted(e["metrics"]), sorted(e["sources"]))
        for step, e in sorted(found.items())
    ]


@dataclass(frozen=True)
class Completion:
    """Did the run complete? (see the module's definitions)"""

    finished: bool
    expected_steps: int | None
    steps_per_rank: dict[int, int]
    stopped_early: dict[int, int]
    failures: list[Failure] = field(default_factory=list)
    failed_ranks: list[int] = field(default_factory=list)
    failed_rank_count: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def run_completion(
    steps_per_rank: Mapping[Any, int],
    failures: list[Failure],
    finished: bool,
    expected_steps: int | None,
    world_size: int | None = None,
    records: RecordCompleteness | None = None,
) -> Completion:
    """Completion from the run's facts: the last step each rank recorded, the failures read from the
    launcher log (rank, kind, message), whether the run wrote its summary, and the steps it was to do.
    With ``records`` (record_completeness of the step records) the counts decide too: a rank that lacks
    a step or repeats one has failed, whatever its last step."""
    per_rank = {int(rank): int(step) for rank, step in steps_per_rank.items()}
    if world_size:
        per_rank = {rank: per_rank.get(rank, 0) for rank in range(int(world_size))} | per_rank
    stopped = {
        rank: step for rank, step in sorted(per_rank.items()) if expected_steps and step < expected_steps
    }
    crashed = {int(f.rank) for f in failures if f.rank is not None}
    gaps = set(records.incomplete_ranks) if records is not None else set()
    failed = sorted(crashed | set(stopped) | gaps)
    unnamed = not finished or bool(failures) or (records is not None and not records.complete)
    count = len(failed) or (1 if unnamed else 0)  # stopped without saying which rank: one
    problems = []
    if not finished:
        problems.append("the training run did not finish (no summary)")
    if stopped:
        problems.append(f"ranks stopped early: {stopped} of {expected_steps} steps")
    if failures:
        first = failures[0]
        problems.append(f"rank {first.rank} failed: {first.message}")
    if records is not None:
        problems += records.problems
    return Completion(
        bool(finished), expected_steps, per_rank, stopped, list(failures), failed, count, problems
    )


def finished_run_completion(
    steps: pd.DataFrame, expected_steps: int | None, world_size: int | None
) -> Completion:
    """Completion of a run that wrote its summary (so it finished) and whose launcher log is not parsed (so
    no failures are known): from the last step each rank recorded."""
    per_rank = {int(rank): int(step) for rank, step in steps.groupby("rank")["step"].max().items()}
    return run_completion(per_rank, [], True, expected_steps, world_size)


def completion_of(run_meta: RunMeta) -> Completion:
    """Completion from parse_logs' run metadata (``parsed/run.json``)."""
    return run_completion(
        run_meta.steps_completed_per_rank,
        run_meta.failures,
        run_meta.finished,
        run_meta.expected_steps,
        run_meta.world_size,
    )
