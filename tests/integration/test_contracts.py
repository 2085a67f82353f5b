"""Every file the smoke run writes that passes from one rule to another reads back through its contract
(zerogate.contracts), and a key changed on the writer's side fails the reader with one line naming the file
and the field. Reads the session's shared smoke run; writes only copies under tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerogate.analysis.parse import read_events, read_steps
from zerogate.contracts.base import Artefact, ContractError, read_lines
from zerogate.contracts.comms import CommsPlan, CommsRecord, CommsVolume
from zerogate.contracts.data import DatasetManifest, ModelInfo
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.machine import Fingerprint, Preflight
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Approval, ModelCompute, PeakPrediction, Plan, RuntimeBaseline
from zerogate.contracts.records import (
    EvalRecord,
    HeldBytes,
    LiveTensorPeak,
    StabiliserEvent,
    StepRecord,
    TrainSummary,
)
from zerogate.contracts.report import Provenance, RunRegistry
from zerogate.contracts.run import Deviations, DsConfig, RunSpec, TrainSettings
from zerogate.contracts.summary import RunSummary
from zerogate.contracts.verdicts import ClaimVerdicts, GateVerdicts, PlanClaims

pytestmark = pytest.mark.integration

# Every JSON artefact of a run (relative to results/<profile>/<machine>/, globs allowed) and its contract.
ARTEFACTS: dict[str, type[Artefact]] = {
    "probe/hardware.json": Fingerprint,
    "preflight/preflight.json": Preflight,
    "deepspeed/run_spec.json": RunSpec,
    "deepspeed/deviations.json": Deviations,
    "plan/plan.json": Plan,
    "plan/plan_measured.json": Plan,
    "claims/seed/claimed_box_plan.json": Plan,
    "plan/approved.json": Approval,
    "plan/model_compute.json": ModelCompute,
    "plan/microbench.json": Microbench,
    "plan/runtime_baseline.json": RuntimeBaseline,
    "plan/peak_memory.json": PeakPrediction,
    "plan/claims.json": PlanClaims,
    "model/model.json": ModelInfo,
    "dataset/manifest.json": DatasetManifest,
    "train/settings.json": TrainSettings,
    "train/summary.json": TrainSummary,
    "train/metrics/held_bytes_rank*.json": HeldBytes,
    "train/metrics/live_tensors_rank*.json": LiveTensorPeak,
    "comms/measurements.json": CommsPlan,
    "comms/records/*/g*/rank*.json": CommsRecord,
    "comms/volume.json": CommsVolume,
    "parsed/run.json": RunMeta,
    "summary/run.json": RunSummary,
    "ledger/ledger_vs_measured.json": LedgerTable,
    "gates/verdicts.json": GateVerdicts,
    "claims/seed/verdicts.json": ClaimVerdicts,
    "provenance.json": Provenance,
    "registry.json": RunRegistry,
}
# One record per line.
LINES = {
    "train/metrics/rank*.jsonl": StepRecord,
    "train/events.jsonl": StabiliserEvent,
    "train/eval.jsonl": EvalRecord,
}


def files(results: Path, pattern: str) -> list[Path]:
    found = sorted(results.glob(pattern))
    assert found, f"the smoke run wrote no {pattern}"
    return found


def test_every_artefact_of_the_run_reads_through_its_contract(smoke_run):
    results = smoke_run.results
    for pattern, contract in ARTEFACTS.items():
        for path in files(results, pattern):
            contract.read(path)
    for pattern, record in LINES.items():
        for path in sorted(results.glob(pattern)):
            read_lines(record, path)
    DsConfig.read(results / "deepspeed/ds_config.json")
    assert set(read_steps(results / "parsed/steps.parquet")["rank"]) == {0, 1}
    read_events(results / "parsed/events.parquet")


def test_no_stamped_file_of_the_run_is_left_without_a_contract_here(smoke_run):
    """A new artefact (any JSON file with a contract stamp) must be listed above, so it is read back too."""
    results = smoke_run.results
    listed = {path for pattern in ARTEFACTS for path in results.glob(pattern)}
    stamped = {
        path
        for path in results.rglob("*.json")
        if "checkpoints" not in path.parts
        and isinstance(data := json.loads(path.read_text()), dict)
        and "contract" in data
    }
    assert stamped - listed == set()


def renamed(data: dict, key: str) -> dict:
    return {(f"{key}_renamed" if k == key else k): v for k, v in data.items()}


@pytest.mark.parametrize("pattern", sorted(ARTEFACTS))
def test_a_key_renamed_on_the_writers_side_fails_the_reader_naming_file_and_field(
    smoke_run, tmp_path, pattern
):
    source = files(smoke_run.results, pattern)[0]
    data = json.loads(source.read_text())
    key = next(k for k in data if k != "contract")
    copy = tmp_path / source.name
    copy.write_text(json.dumps(renamed(data, key)))
    with pytest.raises(ContractError) as error:
        ARTEFACTS[pattern].read(copy)
    message = str(error.value)
    assert message.startswith(f"{copy}: ") and "\n" not in message
    assert key in message or f"{key}_renamed" in message


def test_a_key_renamed_in_one_step_record_fails_naming_the_file_line_and_field(smoke_run, tmp_path):
    source = files(smoke_run.results, "train/metrics/rank*.jsonl")[0]
    lines = source.read_text().splitlines()
    lines[2] = json.dumps(renamed(json.loads(lines[2]), StepRecord.key("step_time_s")))
    copy = tmp_path / source.name
    copy.write_text("\n".join(lines) + "\n")
    with pytest.raises(ContractError) as error:
        read_lines(StepRecord, copy)
    assert str(error.value).startswith(f"{copy}: line 3: step_time(s)")


def test_a_file_of_another_contract_or_version_is_refused_by_its_stamp(smoke_run, tmp_path):
    plan = json.loads((smoke_run.results / "plan/plan.json").read_text())
    copy = tmp_path / "plan.json"
    copy.write_text(json.dumps({**plan, "contract": "plan/0"}))
    with pytest.raises(ContractError, match="contract: contract version 0, this zerogate reads 1"):
        Plan.read(copy)
    with pytest.raises(ContractError, match="contract: a plan file, not gate_verdicts"):
        GateVerdicts.read(smoke_run.results / "plan/plan.json")
