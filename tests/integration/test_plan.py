"""The plan target for the claimed box, the refusal of an infeasible run, and a misspelt DeepSpeed key,
each through Snakemake in a copy of the repository (no training; the session's smoke run lends its probe).
The first two run side by side."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration import prefetch
from tests.integration.pipeline import copy_repo, env, refused
from zerogate.contracts.plan import Plan

pytestmark = pytest.mark.integration


def snakemake(workdir, *args):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("zerogate-plan"))


CLAIMED = ("machine_description=config/machines/claim-rtx5070-rtx4090.yaml",)


def plan_claimed_box(workdir):
    """The plan target for claim-14b on the described box, then for the multi-node overlay it writes, planned
    as a profile of its own: (first invocation, second invocation)."""
    first = snakemake(workdir, "plan", "--config", "profile=claim-14b", *CLAIMED)
    if first.returncode != 0:
        return first, None
    overlay = workdir / "results/claim-14b/claim-rtx5070-rtx4090/plan/multinode-overlay.yaml"
    (workdir / "config/profiles/claim-14b-2nodes.yaml").write_text(overlay.read_text())
    return first, snakemake(workdir, "plan", "--config", "profile=claim-14b-2nodes", *CLAIMED)


def refuse_infeasible(workdir):
    """The whole DAG asked for claim-14b on this machine: (invocation, wall seconds)."""
    started = time.monotonic()
    done = snakemake(workdir, "--config", "profile=claim-14b", "machine=ci-refuse")
    return done, time.monotonic() - started


@prefetch.prefetched
def prepare_plans(tmp_path_factory, smoke_run):
    """Both planning runs, each in its own copy (the refused one with the smoke run's probe), side by side
    (each is mostly one process at a time starting up)."""
    claimed, refused_ = (
        copy_repo(tmp_path_factory.mktemp(name)) for name in ("zerogate-claimed", "zerogate-refuse")
    )
    smoke_run.share_probe(refused_, "claim-14b", "ci-refuse")

    def build():
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(plan_claimed_box, claimed)
            second = pool.submit(refuse_infeasible, refused_)
            return {"claimed": (claimed, first.result()), "refused": (refused_, second.result())}

    return build


@pytest.fixture(scope="module")
def plans(tmp_path_factory, smoke_run):
    """{"claimed": (workdir, (first, second)), "refused": (workdir, (done, seconds))}."""
    return prefetch.result(__name__, prepare_plans, tmp_path_factory, smoke_run)


def test_plan_for_the_claimed_box_gives_the_on_paper_verdict(plans):
    workdir, (done, overlay_done) = plans["claimed"]
    assert done.returncode == 0, done.stderr[-3000:]
    for scheme in ("ddp", "zero1", "zero2", "zero3", "zero3_offload_optimizer", "zero3_offload_all"):
        assert f"  {scheme} " in done.stderr
    assert "throughput floor: micro-step" in done.stderr
    # The claims on paper, in the one vocabulary (zerogate.contracts.verdicts): the floor rules the step time
    # out.
    assert (
        "  optimizer_step_time: does not hold" in done.stderr
        and "  run_fits_machine: does not hold" in done.stderr
    )
    plan = Plan.read(workdir / "results/claim-14b/claim-rtx5070-rtx4090/plan/plan.json")
    assert plan.floor.optimizer_step_floor_s > 20 and plan.machine_source == "described"
    # What FSDP2, with and without its offload, would need on the same box.
    assert [p.variant for p in plan.peers] == [
        "fsdp2",
        "fsdp2-offload",
    ] and "  fsdp2-offload: " in done.stderr
    assert not (workdir / "results/claim-14b/claim-rtx5070-rtx4090/probe").exists()  # nothing probed
    # The planner's multi-node answer, printed and written as a profile overlay that runs: planned as a
    # profile of its own on the same box, it fits.
    overlay = workdir / "results/claim-14b/claim-rtx5070-rtx4090/plan/multinode-overlay.yaml"
    assert f"{overlay.relative_to(workdir)}:" in done.stderr and "nodes:" in overlay.read_text()
    assert overlay_done.returncode == 0, overlay_done.stderr[-3000:]
    assert "  run_fits_machine: holds" in overlay_done.stderr and "4 ranks" in overlay_done.stderr


def test_infeasible_run_is_refused_before_anything_is_launched(plans):
    workdir, (done, elapsed) = plans["refused"]
    print(f"infeasible claim-14b refused after {elapsed:.1f} s (wall, snakemake start to exit)")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "zerogate: error: plan refused" in output
    assert "host (all ranks of the node): host RAM needs" in output and "capacity" in output
    results = workdir / "results/claim-14b/ci-refuse"
    assert not (results / "train").exists() and not (results / "logs/train.log").exists()
    assert not (results / "dataset").exists()  # the planner ran first: no other work was started
    assert not (results / "plan/approved.json").exists()


def test_misspelt_deepspeed_key_is_refused_with_its_path(workdir, smoke_run):
    smoke_run.share_probe(workdir, "smoke", "ci-typo")
    template = workdir / "config/deepspeed/claim_ds_config.json"
    original = template.read_text()
    config = json.loads(original)
    config["zero_optimization"]["stage3_prefetch_bucket_sise"] = config["zero_optimization"].pop(
        "stage3_prefetch_bucket_size"
    )
    try:
        template.write_text(json.dumps(config))
        line = refused(snakemake(workdir, "plan", "--config", "profile=smoke", "machine=ci-typo"))
    finally:
        template.write_text(original)
    assert (
        "config/deepspeed/claim_ds_config.json: zero_optimization.stage3_prefetch_bucket_sise: unknown key"
        in line
    )
    assert not (workdir / "results/smoke/ci-typo/plan/plan.json").exists()
