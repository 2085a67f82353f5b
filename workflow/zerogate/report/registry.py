"""The run registry: one machine-readable JSON summary per run (zerogate.contracts.report.RunRegistry), for
diffing and collecting runs; ``compare`` reads nothing else. Every path in it is relative to the repository
root; the gates' evidence stays in gates/verdicts.json."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from zerogate.analysis.measures import SpikeRule, summarise_run
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.report import Provenance, RegistryFiles, RegistryProvenance, RunRegistry
from zerogate.contracts.verdicts import JudgedGate
from zerogate.contracts.run import Deviations
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.hashing import sha256_json


def registry_record(*, machine: str, verdicts: GateVerdicts, steps: pd.DataFrame, run_meta: RunMeta,
                    provenance: Provenance, deviations: Deviations, files: dict[str, Any], warmup_steps: int,
                    spike_rule: SpikeRule) -> RunRegistry:
    return RunRegistry(
        pipeline_version=provenance.pipeline_version,
        run_id=provenance.run_id,
        profile=provenance.profile,
        machine=machine,
        registered_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        verdict_counts=verdicts.counts,
        reproduction=verdicts.reproduction,
        gates=[JudgedGate(**gate.model_dump(exclude={"evidence"})) for gate in verdicts.gates],
        summary=summarise_run(steps, warmup_steps, spike_rule, run_meta),
        run=run_meta,
        provenance=RegistryProvenance(
            config_hash=provenance.config_hash, dataset_sha256=provenance.dataset.content_sha256,
            ds_config_sha256=sha256_json(provenance.ds_config), git=provenance.git, packages=provenance.packages,
            machine=provenance.machine, recorded_at=provenance.recorded_at),
        deviations=deviations.deviations,
        files=RegistryFiles(**files),
    )
