"""The Snakemake workflow itself: `snakemake --lint` is clean and `snakemake -n` builds the DAG of every
shipped profile, of the described-machine plan and of the benchmarks (seconds each, nothing is run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in (REPO / "config/profiles").glob("*.yaml"))


def snakemake(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def planned_jobs(done: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> job count from a dry run's job table."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("Job stats:")[1].split("total")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def test_lint_is_clean():
    done = snakemake("--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Congratulations, your workflow is in a good condition!" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def dry_runs() -> dict[str, subprocess.CompletedProcess]:
    """Every profile's dry run, started together (each is seconds of parsing; the cores share them)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    started = {
        profile: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-n",
                "--nolock",
                "--config",
                f"profile={profile}",
                "machine=dry-run",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for profile in PROFILES
    }
    done = {}
    for profile, process in started.items():
        stdout, stderr = process.communicate(timeout=300)
        done[profile] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_builds_its_dag(profile, dry_runs):
    done = dry_runs[profile]
    jobs = planned_jobs(done)
    for rule in (
        "probe_hardware",
        "render_deepspeed_config",
        "plan_run",
        "approve_plan",
        "prepare_model",
        "prepare_dataset",
        "train",
        "check_gates",
        "write_report",
        "register_run",
    ):
        assert jobs.get(rule) == 1, (rule, jobs)
    assert f"results/{profile}/dry-run/train/summary.json" in done.stdout
    assert "{profile}" not in done.stdout and "{machine}" not in done.stdout


def test_described_machine_is_planned_never_probed_or_trained():
    done = snakemake(
        "-n",
        "--cores",
        "1",
        "plan",
        "--config",
        "profile=claim-14b",
        "machine_description=config/machines/claim-rtx5070-rtx4090.yaml",
    )
    jobs = planned_jobs(done)
    # The plan target judges the default claim (the seed's) on paper for its claimed box too: its plan is
    # planned in-process, under the claim's own directory.
    assert set(jobs) == {
        "render_deepspeed_config",
        "plan_run",
        "plan_claimed_box",
        "judge_claim_on_paper",
        "judge_plan_claims",
        "plan",
    }, jobs
    assert "results/claim-14b/claim-rtx5070-rtx4090/plan/plan.txt" in done.stdout
    assert "results/claim-14b/claim-rtx5070-rtx4090/claims/seed/claimed_box_plan.json" in done.stdout
    assert "plan/ds_config.json" not in done.stdout  # the planner reads render_deepspeed_config's rendering


def test_a_plan_of_your_model_plans_no_claimed_box_and_judges_no_claim():
    model, box = "qwen3-8b", "config/machines/claim-rtx5070-rtx4090.yaml"
    done = snakemake(
        "-n",
        "-F",
        "--cores",
        "1",
        "plan_model",
        "--config",
        f"model={model}",
        f"box={box}",
        "machine=dry-run",
    )
    jobs = planned_jobs(done)
    assert set(jobs) == {"plan_model_run", "plan_model"}, jobs
    assert "results/plans/qwen3-8b/claim-rtx5070-rtx4090/zero3-offload-cpu-" in done.stdout
    bad = snakemake(
        "-n",
        "--cores",
        "1",
        "plan_model",
        "--config",
        f"model={model}",
        f"box={box}",
        "offload=nvme",
        "zero=2",
    )
    assert bad.returncode != 0
    assert "zerogate: error: --config: offload (OFFLOAD): nvme needs zero=3" in bad.stderr


def test_benchmarks_are_targets_on_the_pipelines_rules():
    jobs = planned_jobs(
        snakemake("-n", "bench", "--config", "profile=bench", "machine=dry-run", "bench_repeats=1")
    )
    assert (
        jobs["train_bench_run"] == 5 and jobs["train_ddp_baseline"] == 1
    )  # zero3 (+untuned, no-metrics), 2 variants
    assert jobs["render_variant_config"] == 2 and jobs["prepare_dataset"] == 1 and jobs["approve_plan"] == 1
    assert {
        "bench_ddp_vs_zero3",
        "bench_metrics_overhead",
        "bench_gloo_latency",
        "bench_planner_grid",
    } <= set(jobs)
    # The planner's grid: one run of the pipeline per point, under the profile write_grid_profiles wrote.
    points = yaml.safe_load((REPO / "config/planner_grid.yaml").read_text())["points"]
    assert jobs["write_grid_profiles"] == 1 and jobs["run_grid_point"] == len(points) >= 12


def test_the_default_profiles_report_shows_its_variants_and_hf_trainer_is_never_trained():
    done = snakemake("-n", "--config", "profile=cpu-tiny", "machine=dry-run")
    jobs = planned_jobs(done)
    # 11 listed: 10 trained (hf-trainer only stated), each with the planner's prediction (FSDP2's its own).
    assert jobs["train_variant"] == 10 and jobs["predict_variant_peak_memory"] == 10
    assert jobs["compare_variants"] == 1 and jobs["plot_variant_losses"] == 1
    assert "variants/hf-trainer" not in done.stdout
    report = next(
        block for block in done.stdout.split("\n\n") if re.search(r"^rule write_report:", block, re.MULTILINE)
    )
    assert "results/cpu-tiny/dry-run/variants/comparison.json" in report
    smoke = planned_jobs(snakemake("-n", "--config", "profile=smoke", "machine=dry-run"))
    assert "train_variant" not in smoke and "compare_variants" not in smoke


def test_every_training_rule_needs_the_approved_plan():
    # cpu-tiny lists the variants (the smoke profile none: its report has no Choices section).
    done = snakemake(
        "-n", "train_variants", "bench", "--config", "profile=cpu-tiny", "machine=dry-run", "bench_repeats=1"
    )
    jobs = planned_jobs(done)
    assert jobs["train_variant"] >= 1 and jobs["train_bench_run"] >= 1
    blocks = done.stdout.split("\n\n")
    for block in blocks:
        if re.search(
            r"^(local)?rule (train|train_variant|train_bench_run|train_ddp_baseline|prepare_model|"
            r"write_train_settings):",
            block,
            re.MULTILINE,
        ):
            assert "results/cpu-tiny/dry-run/plan/approved.json" in block, block
