"""The run registry: one machine-readable JSON summary per run (zerogate.contracts.report.RunRegistry), for
diffing and collecting runs; ``compare`` reads it (and the run summary beside it). Every path in it is
relative to the repository root; the gates' evidence stays in gates/verdicts.json, the statistics are the
run summary's (summary/run.json)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from zerogate.analysis.evidence import RunEvidence
from zerogate.contracts.report import RegistryFiles, RegistryProvenance, RunRegistry
from zerogate.contracts.verdicts import JudgedGate
from zerogate.hashing import sha256_json


def registry_record(machine: str, run: RunEvidence, files: dict[str, Any]) -> RunRegistry:
    """The run's registry from what register_run reads of it (zerogate.analysis.evidence): ``summary`` is the
    run summary's statistics (the repeats pooled), ``repeats`` each repeat's own (empty for one run)."""
    provenance, verdicts, summary = run.provenance, run.verdicts, run.run_summary
    each = summary.repeats
    return RunRegistry(
        pipeline_version=provenance.pipeline_version,
        run_id=provenance.run_id,
        profile=provenance.profile,
        machine=machine,
        registered_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        verdict_counts=verdicts.counts,
        reproduction=verdicts.reproduction,
        gates=[JudgedGate(**gate.model_dump(exclude={"evidence"})) for gate in verdicts.gates],
        summary=summary.statistics,
        repeats=[stats for stats in each if stats is not None] if len(each) > 1 else [],
        run=run.run_meta,
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
        deviations=run.deviations.deviations,
        files=RegistryFiles(**files),
    )
