"""The smoke DAG through Snakemake's Slurm executor against a real Slurm cluster (issue 13).

.ci/run starts a one-node cluster on localhost (tests/slurm/cluster.sh: munge, slurmctld, slurmd) before
the suite, stops it after, and sets ZEROGATE_REQUIRE_SLURM=1 so that a cluster that does not answer fails
the test. Elsewhere it runs when `sinfo` finds an idle node and is skipped otherwise. The run mostly waits
for the executor's status checks, so it runs in the background beside the rest of the suite (background.py).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.background import SLURM_MACHINE, slurm_answers, start_slurm_run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurm_run(smoke_run, tmp_path_factory):
    """The smoke profile through the Slurm executor: started in the background when the smoke run was ready
    (tests/integration/conftest.py), else here."""
    if not slurm_answers():
        if os.environ.get("ZEROGATE_REQUIRE_SLURM"):
            pytest.fail("no Slurm cluster answers (sinfo): .ci/run starts one with tests/slurm/cluster.sh")
        pytest.skip("no Slurm cluster (tests/slurm/cluster.sh start makes a one-node one)")
    run = smoke_run.background.get("slurm") or start_slurm_run(smoke_run.workdir, tmp_path_factory.mktemp("zerogate-slurm"))
    code, output = run.wait(timeout=1800)
    assert code == 0, output[-4000:]
    return run.workdir, run.workdir / "results" / "smoke" / SLURM_MACHINE


def test_every_rule_ran_as_a_slurm_job(slurm_run):
    workdir, _ = slurm_run
    ran = {path.name.removeprefix("rule_") for path in (workdir / ".snakemake/slurm_logs").iterdir()
           if any(path.glob("*.log"))}
    local = {"approve_plan", "judge_plan_claims", "write_train_settings", "all"}  # localrules: no job
    assert {"probe_hardware", "prepare_dataset", "render_deepspeed_config", "plan_run", "train", "parse_logs",
            "check_gates", "write_report", "register_run"} <= ran
    assert not ran & local
    train_job = next((workdir / ".snakemake/slurm_logs/rule_train").glob("*.log")).read_text()
    assert "Finished jobid" in train_job or "100%" in train_job


def test_the_slurm_run_judges_as_the_local_one(slurm_run, smoke_run):
    _, results = slurm_run
    there = json.loads((results / "gates/verdicts.json").read_text())["gates"]
    here = json.loads((smoke_run.results / "gates/verdicts.json").read_text())["gates"]
    assert [(g["name"], g["verdict"]) for g in there] == [(g["name"], g["verdict"]) for g in here]
    assert json.loads((results / "train/summary.json").read_text())["completed_steps"] == 40
    assert len(list((results / "report").glob("zerogate-*.html"))) == 1
