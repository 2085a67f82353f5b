"""What the judging rules read of a run, loaded once from a rule's named inputs into one typed bundle.

check_gates, write_report and register_run each name their inputs after the fields of :class:`RunEvidence`
(``run_summary``, ``steps``, ``verdicts``, ...); :func:`load_evidence` reads every one the rule has with its
contract and leaves the others None, and the bundle is passed whole to the gates, the report and the
registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis.parse import read_events, read_steps
from zerogate.contracts.base import read_lines
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import EvalRecord, TrainSummary
from zerogate.contracts.report import Provenance, VariantsTable
from zerogate.contracts.run import Deviations, DsConfig, RunSpec
from zerogate.contracts.summary import RunSummary
from zerogate.contracts.verdicts import ClaimVerdicts, GateVerdicts


@dataclass(frozen=True)
class RunEvidence:
    """One run's files as the judging rules read them; a field is None where the rule has no such input."""

    run_summary: RunSummary | None = None  # summary/run.json: every statistic, computed once
    steps: pd.DataFrame | None = None  # parse_logs' tables
    events: pd.DataFrame | None = None
    run_meta: RunMeta | None = None
    train_summary: TrainSummary | None = None  # the training run's own summary.json
    run_spec: RunSpec | None = None
    deviations: Deviations | None = None
    fingerprint: Fingerprint | None = None
    ds_config: DsConfig | None = None
    plan: Plan | None = None  # the plan with the measured compute term
    claimed_plan: Plan | None = None
    ledger: LedgerTable | None = None
    communication: CommsVolume | None = None
    verdicts: GateVerdicts | None = None  # the gates' verdicts
    claims: ClaimVerdicts | None = None  # the seed's claims judged
    provenance: Provenance | None = None
    evaluation: list[EvalRecord] | None = None
    variants: VariantsTable | None = None  # with profile key ``variants``: the variants' table


# How each field's file is read (a named input of the rules; a list input gives its first file, or None).
READERS: dict[str, Callable[[str], Any]] = {
    "run_summary": RunSummary.read,
    "steps": read_steps,
    "events": read_events,
    "run_meta": RunMeta.read,
    "train_summary": TrainSummary.read,
    "run_spec": RunSpec.read,
    "deviations": Deviations.read,
    "fingerprint": Fingerprint.read,
    "ds_config": DsConfig.read,
    "plan": Plan.read,
    "claimed_plan": Plan.read,
    "ledger": LedgerTable.read,
    "communication": CommsVolume.read,
    "verdicts": GateVerdicts.read,
    "claims": ClaimVerdicts.read,
    "provenance": Provenance.read,
    "evaluation": lambda path: read_lines(EvalRecord, path),
    "variants": VariantsTable.read,
}


def load_evidence(inputs: Mapping[str, str | Path | list[str]]) -> RunEvidence:
    """The bundle from a rule's named inputs (``dict(snakemake.input.items())``): each input named after a
    field read by its contract; inputs of other names (figures, repeats' tables) are not evidence."""
    found: dict[str, Any] = {}
    for name, reader in READERS.items():
        path = inputs.get(name)
        if isinstance(path, list):  # an input that only some profiles have: empty, or one file
            path = path[0] if path else None
        if path is not None:
            found[name] = reader(str(path))
    return RunEvidence(**found)
