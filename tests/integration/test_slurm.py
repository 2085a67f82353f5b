"""The two-node DAG through Snakemake's Slurm executor against a real Slurm cluster.

.ci/run starts a one-node cluster on localhost (tests/slurm/cluster.sh: munge, slurmctld, slurmd) before
the suite, stops it after, and sets ZEROGATE_REQUIRE_SLURM=1 so that a cluster that does not answer fails
the test. Elsewhere it runs when `sinfo` finds an idle node and is skipped otherwise. The run is the
suite's two-node run (profile cpu-2node, rank 1 a straggler; tests/integration/conftest.py), which goes
through the Slurm executor whenever a cluster answers: every rule a Slurm job, the train job starting both
nodes' launchers. It mostly waits for the executor's status checks, so it runs in the background beside the
rest of the suite (background.py). That it judges as the local one-node run is test_two_nodes.py's test,
on the same run.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurm_run(two_node_run):
    """(working directory, results directory) of the two-node run, which went through the Slurm executor."""
    if not two_node_run.through_slurm:
        if os.environ.get("ZEROGATE_REQUIRE_SLURM"):
            pytest.fail("no Slurm cluster answered (sinfo): .ci/run starts one with tests/slurm/cluster.sh")
        pytest.skip("no Slurm cluster (tests/slurm/cluster.sh start makes a one-node one)")
    return two_node_run.workdir, two_node_run.results


def test_every_rule_ran_as_a_slurm_job(slurm_run):
    workdir, _ = slurm_run
    ran = {
        path.name.removeprefix("rule_")
        for path in (workdir / ".snakemake/slurm_logs").iterdir()
        if any(path.glob("*.log"))
    }
    local = {"approve_plan", "judge_plan_claims", "write_train_settings", "all"}  # localrules: no job
    assert {
        "probe_hardware",
        "prepare_dataset",
        "render_deepspeed_config",
        "plan_run",
        "train",
        "parse_logs",
        "check_gates",
        "write_report",
        "register_run",
    } <= ran
    assert not ran & local
    train_job = next((workdir / ".snakemake/slurm_logs/rule_train").glob("*.log")).read_text()
    assert "Finished jobid" in train_job or "100%" in train_job
