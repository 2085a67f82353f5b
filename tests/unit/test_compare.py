import json

import pytest

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import no_events, synthetic_steps
from tests.unit.test_report import DEVIATION, PROVENANCE
from zerogate.report.compare import comparison_table, flags, gate_matrix, load_run, render_comparison
from zerogate.errors import InputError
from zerogate.analysis.gates import evaluate
from zerogate.analysis.parse import run_metadata
from zerogate.report.registry import SCHEMA, registry_record


def write_run(root, tiny_profile, machine, dataset_hash="d" * 64, step_time=0.5, profile="smoke"):
    """A run directory as the pipeline leaves it: registry.json plus parsed/steps.parquet."""
    run_dir = root / "results" / profile / machine
    (run_dir / "parsed").mkdir(parents=True)
    steps = synthetic_steps(step_time=step_time)
    steps.to_parquet(run_dir / "parsed/steps.parquet")
    verdicts = evaluate(tiny_profile["gates"], steps, no_events(), {"completed_steps": 200},
                        {"training": {"optimizer_steps": 200}}, [DEVIATION], CPU_FINGERPRINT, 5)
    provenance = {**PROVENANCE, "profile": profile, "run_id": f"{profile}-{machine}-12345678",
                  "dataset": {**PROVENANCE["dataset"], "content_sha256": dataset_hash}}
    base = f"results/{profile}/{machine}"
    record = registry_record(machine=machine, verdicts=verdicts, steps=steps,
                             run_meta=run_metadata(steps, no_events(), {}, "", 200), provenance=provenance,
                             deviations=[DEVIATION], warmup_steps=5,
                             files={"steps": f"{base}/parsed/steps.parquet", "report": f"{base}/report/x.html"})
    (run_dir / "registry.json").write_text(json.dumps(record, default=str))
    return run_dir


def test_registry_holds_gates_summary_and_provenance(tmp_path, tiny_profile):
    record = load_run(write_run(tmp_path, tiny_profile, "lab-a"))
    assert record["schema"] == SCHEMA and record["machine"] == "lab-a"
    assert [g["name"] for g in record["gates"]] == [g["name"] for g in tiny_profile["gates"]]
    assert record["provenance"]["dataset_sha256"] == "d" * 64 and len(record["provenance"]["ds_config_sha256"]) == 64
    assert record["summary"]["ranks"] == 2


def test_differing_dataset_hash_is_flagged(tmp_path, tiny_profile):
    runs = [load_run(write_run(tmp_path, tiny_profile, "lab-a")),
            load_run(write_run(tmp_path, tiny_profile, "lab-b", dataset_hash="e" * 64, step_time=2.5))]
    flagged = flags(runs)
    assert flagged["smoke-lab-a-12345678"] == []
    assert "dataset hash differs" in flagged["smoke-lab-b-12345678"][0]
    table = comparison_table(runs)
    assert table["comparability"].tolist()[0] == "ok" and "dataset hash" in table["comparability"].tolist()[1]
    assert table["gate optimizer_step_time"].tolist() == ["PASS", "FAIL"]  # 2.5 s steps fail 1.82 s
    assert list(gate_matrix(table).columns) == ["gate", "smoke-lab-a-12345678", "smoke-lab-b-12345678"]


def test_same_runs_are_not_flagged(tmp_path, tiny_profile):
    runs = [load_run(write_run(tmp_path, tiny_profile, m)) for m in ("lab-a", "lab-b")]
    assert all(not v for v in flags(runs).values())


def test_missing_registry_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(InputError, match=r"nowhere/registry.json: no run registry"):
        load_run(tmp_path / "nowhere")
