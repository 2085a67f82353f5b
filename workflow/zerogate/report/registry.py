"""The run registry: one machine-readable JSON summary per run (zerogate.contracts.report.RunRegistry), for
diffing and collecting runs; ``compare`` reads nothing else. Every path in it is relative to the repository
root; the gates' evidence stays in gates/verdicts.json."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from zerogate.analysis.intervals import IntervalRule
from zerogate.analysis.loss_trend import SpikeRule
from zerogate.analysis.summary import summarise_repeats, summarise_run
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.report import Provenance, RegistryFiles, RegistryProvenance, RunRegistry
from zerogate.contracts.run import Deviations
from zerogate.contracts.verdicts import GateVerdicts, JudgedGate
from zerogate.hashing import sha256_json


def registry_record(
    *,
    machine: str,
    verdicts: GateVerdicts,
    steps: pd.DataFrame,
    run_meta: RunMeta,
    provenance: Provenance,
    deviations: Deviations,
    files: dict[str, Any],
    warmup_steps: int,
    spike_rule: SpikeRule,
    interval_rule: IntervalRule | None = None,
    repeat_steps: list[pd.DataFrame] = (),
    repeat_run_metas: list[RunMeta] = (),
) -> RunRegistry:
    """The run's registry: ``summary`` pools the repeats (``repeat_steps``, the other repeats' steps) with the
    intervals of ``interval_rule``; ``repeats`` lists each repeat's own statistics (empty for one run)."""
    repeated = (
        summarise_repeats(
            [steps, *repeat_steps],
            warmup_steps,
            spike_rule,
            [run_meta, *repeat_run_metas],
            interval_rule or IntervalRule(),
        )
        if interval_rule is not None or repeat_steps
        else None
    )
    return RunRegistry(
        pipeline_version=provenance.pipeline_version,
        run_id=provenance.run_id,
        profile=provenance.profile,
        machine=machine,
        registered_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        verdict_counts=verdicts.counts,
        reproduction=verdicts.reproduction,
        gates=[JudgedGate(**gate.model_dump(exclude={"evidence"})) for gate in verdicts.gates],
        summary=repeated.pooled if repeated else summarise_run(steps, warmup_steps, spike_rule, run_meta),
        repeats=[stats for stats in repeated.each if stats is not None]
        if repeated and len(repeated.each) > 1
        else [],
        run=run_meta,
        provenance=RegistryProvenance(
            config_hash=provenance.config_hash,
            measurement_hash=provenance.measurement_hash,
            fault_injection=(provenance.resolved_profile.get("stabiliser") or {}).get("inject"),
            dataset_sha256=provenance.dataset.content_sha256,
            ds_config_sha256=sha256_json(provenance.ds_config),
            git=provenance.git,
            packages=provenance.packages,
            machine=provenance.machine,
            recorded_at=provenance.recorded_at,
        ),
        deviations=deviations.deviations,
        files=RegistryFiles(**files),
    )
