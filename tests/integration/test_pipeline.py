"""The whole DAG on the smoke profile, in a copy of the repository, and its refusals of bad input.

These run Snakemake and DeepSpeed for real (2 CPU ranks over gloo): about two minutes in all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from zerogate import __version__

REPO = Path(__file__).resolve().parents[2]
MACHINE = "ci-box"
pytestmark = pytest.mark.integration


def copy_repo(target: Path) -> Path:
    for name in ("Snakefile", "workflow", "config", "envs"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, target / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "test copy"], cwd=target, check=True)
    return target


def env() -> dict[str, str]:
    # The rules call `python` and `deepspeed`: the ones of this test's environment.
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def snakemake(workdir: Path, *args: str, profile: str = "smoke") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"profile={profile}",
               f"machine={MACHINE}", *args]
    return subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = copy_repo(tmp_path_factory.mktemp("zerogate"))
    shm_before = set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"))
    started = time.monotonic()
    done = snakemake(workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"smoke pipeline end to end: {time.monotonic() - started:.1f} s")
    # DeepSpeed's CPU comm op leaves its /dev/shm (RAM) buffers behind; zerogate.train.launch removes them.
    assert set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")) <= shm_before
    return workdir, workdir / "results" / "smoke" / MACHINE


def test_every_gate_has_definition_value_threshold_and_verdict(run, smoke_profile):
    _, results = run
    verdicts = json.loads((results / "gates/verdicts.json").read_text())
    assert [g["name"] for g in verdicts["gates"]] == [g["name"] for g in smoke_profile["gates"]]
    # Not measurable on the CPU default: fp32 has no loss scaler to skip steps.
    unmeasurable = {"overflow_skip_fraction"}
    for gate in verdicts["gates"]:
        assert gate["definition"] and gate["threshold"] is not None
        assert gate["verdict"] in ("PASS", "FAIL", "NOT MEASURED")
        if gate["name"] in unmeasurable:
            assert gate["verdict"] == "NOT MEASURED" and gate["reason"], gate
        else:
            assert gate["measured"] is not None, gate
    by_name = {g["name"]: g for g in verdicts["gates"]}
    assert by_name["zero_nonfinite"]["verdict"] == "PASS"
    assert by_name["loss_convergence"]["verdict"] == "PASS"
    # The planner's floor for this machine is known, so time / floor is measured (>= 0, a ratio).
    assert by_name["step_time_over_physical_floor"]["measured"] > 0
    reproduction = verdicts["reproduction"]
    assert reproduction["faithful"] is False
    assert any("fp16.enabled" in r for r in reproduction["reasons"])


def test_both_ranks_trained_every_step_and_loss_fell(run):
    _, results = run
    steps = pd.read_parquet(results / "parsed/steps.parquet")
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert (steps.groupby("rank")["step"].apply(sorted).apply(list) == [list(range(1, 41))] * 2).all()
    loss = steps[steps["rank"] == 0].sort_values("step")["loss"]
    assert loss.notna().all() and (loss < float("inf")).all()
    assert loss.tail(5).mean() < loss.head(5).mean()
    assert (steps["step_time(s)"] > 0).all() and (steps["memory/device_peak(GiB)"] > 0).all()


def test_ledger_matches_what_each_rank_held_within_5_percent(run):
    _, results = run
    table = json.loads((results / "ledger/ledger_vs_measured.json").read_text())
    assert {r["rank"] for r in table["rows"]} == {0, 1}
    assert table["within_5_percent"] is True, table["rows"]
    assert json.loads((results / "plan/plan.json").read_text())["fits"] is True


def test_render_records_deviations_and_no_auto(run):
    _, results = run
    ds_config = (results / "deepspeed/ds_config.json").read_text()
    assert '"auto"' not in ds_config
    deviations = json.loads((results / "deepspeed/deviations.json").read_text())
    assert {"fp16.enabled", "zero_optimization.reduce_bucket_size"} <= {d["path"] for d in deviations}


def test_report_is_versioned_and_names_its_provenance(run):
    workdir, results = run
    reports = list((results / "report").glob("zerogate-v*.html"))
    assert len(reports) == 1
    assert reports[0].name.startswith(f"zerogate-v{__version__}-smoke-{MACHINE}-")
    page = reports[0].read_text()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=workdir, capture_output=True, text=True).stdout.strip()
    provenance = json.loads((results / "provenance.json").read_text())
    dataset_hash = json.loads((results / "dataset/manifest.json").read_text())["content_sha256"]
    assert provenance["git"]["at_training"]["commit"] == commit
    for fact in (commit, provenance["config_hash"], dataset_hash, "deepspeed", "0.19.8"):
        assert fact in page
    assert page.index("id='verdicts'") < page.index("<h2>Figures</h2>")


def test_rerunning_check_gates_does_not_retrain(run):
    workdir, results = run
    summary = results / "train/summary.json"
    trained_at = summary.stat().st_mtime_ns
    verdicts_at = (results / "gates/verdicts.json").stat().st_mtime_ns
    started = time.monotonic()
    done = snakemake(workdir, "-R", "check_gates")
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"-R check_gates: {time.monotonic() - started:.1f} s")
    assert summary.stat().st_mtime_ns == trained_at
    assert (results / "gates/verdicts.json").stat().st_mtime_ns > verdicts_at
    assert "rule train:" not in done.stderr and "localrule train:" not in done.stderr


def test_editing_a_gate_threshold_rejudges_without_retraining(run):
    workdir, results = run
    profile = workdir / "config/profiles/smoke.yaml"
    original = profile.read_text()
    gates = json.loads((results / "gates/verdicts.json").read_text())["gates"]
    strict_time = [{k: g[k] for k in ("name", "claim", "metric", "statistic", "comparison", "threshold", "unit", "definition")}
                   for g in gates]
    strict_time[0]["threshold"] = 0.001  # no machine makes an optimizer step in a millisecond
    trained_at = (results / "train/summary.json").stat().st_mtime_ns
    try:
        profile.write_text(original + "gates: " + json.dumps(strict_time) + "\n")
        done = snakemake(workdir)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        profile.write_text(original)
    assert (results / "train/summary.json").stat().st_mtime_ns == trained_at
    verdict = json.loads((results / "gates/verdicts.json").read_text())["gates"][0]
    assert verdict["threshold"] == 0.001 and verdict["verdict"] == "FAIL"
    assert len(list((results / "report").glob("zerogate-v*.html"))) == 2  # the earlier report is kept


def test_default_report_opens_in_headless_chromium(run, tmp_path):
    from tests.browser import chromium, dump_dom, screenshot

    if chromium() is None:
        pytest.skip("needs Debian's chromium (.ci/run installs it)")
    _, results = run
    report = sorted((results / "report").glob("zerogate-v*.html"))[0]
    dom = dump_dom(report)
    assert '<table id="verdicts">' in dom and dom.index('id="verdicts"') < dom.index("<h2>Figures</h2>")
    screenshot(report, tmp_path / "report.png")


def test_run_registry_lists_gates_figures_and_provenance(run):
    _, results = run
    registry = json.loads((results / "registry.json").read_text())
    verdicts = json.loads((results / "gates/verdicts.json").read_text())
    assert [g["verdict"] for g in registry["gates"]] == [g["verdict"] for g in verdicts["gates"]]
    assert registry["provenance"]["dataset_sha256"] == json.loads((results / "dataset/manifest.json").read_text())["content_sha256"]
    for figure in registry["files"]["figures"].values():
        assert (run[0] / figure).exists()


def test_strict_fails_the_invocation_but_keeps_verdicts_and_report(run):
    workdir, results = run
    profile = workdir / "config/profiles/smoke.yaml"
    original = profile.read_text()
    trained_at = (results / "train/summary.json").stat().st_mtime_ns
    try:
        profile.write_text(original + "gates: [{name: impossible_step_time, claim: test, metric: step_time(s), statistic: median,"
                           " comparison: '<=', threshold: 0.000001, unit: s, definition: test}]\n")
        done = snakemake(workdir, "strict=True")  # one more --config entry
        assert done.returncode != 0
        assert "strict: 1 gate(s) FAIL (impossible_step_time" in done.stderr
        verdicts = json.loads((results / "gates/verdicts.json").read_text())
        assert verdicts["gates"][0]["verdict"] == "FAIL"  # kept for the user to read
        assert not list((results / "gates").glob("strict-*.passed"))
        assert snakemake(workdir).returncode == 0  # strict is off by default
    finally:
        profile.write_text(original)
    assert (results / "train/summary.json").stat().st_mtime_ns == trained_at


def test_workflow_passes_snakemake_lint(run):
    workdir, _ = run
    done = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=workdir, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Congratulations" in done.stdout + done.stderr


BAD_PROFILES = {
    "negative step count": ("training: {optimizer_steps: -5}", "training.optimizer_steps: -5 is less than the minimum of 1"),
    "misspelt key": ("training: {optimizer_stepz: 5}", "training.optimizer_stepz: unknown key"),
    "wrong type": ("training: {optimizer_steps: many}", "training.optimizer_steps: 'many' is not of type 'integer'"),
    "geometry that does not multiply out": ("training: {train_batch_size: 20}", "training.train_batch_size: 20 is not"),
    "missing template": ("deepspeed: {template: config/deepspeed/nope.json}", "deepspeed.template: no such file"),
    "nested unknown key": ("model: {hidden_sise: 32}", "model.hidden_sise: unknown key"),
}


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("zerogate-bad"))


def refused(done: subprocess.CompletedProcess) -> str:
    """The single zerogate error line of a refused invocation."""
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("zerogate: error:")]
    assert len(lines) == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_is_refused_with_file_and_key(clean_copy, case):
    body, expected = BAD_PROFILES[case]
    (clean_copy / "config/profiles/bad.yaml").write_text(f"extends: smoke\n{body}\n")
    line = refused(snakemake(clean_copy, profile="bad"))
    assert f"config/profiles/bad.yaml: {expected}" in line
    assert not (clean_copy / "results").exists()


def test_unknown_profile_and_unknown_config_key_are_refused(clean_copy):
    line = refused(snakemake(clean_copy, profile="nope"))
    assert "profile: unknown profile 'nope'" in line and "smoke" in line
    line = refused(snakemake(clean_copy, "--config", "bogus=1"))
    assert "--config: bogus: unknown key" in line
    (clean_copy / "config/config.yaml").write_text("profile: smoke\nmachine: auto\nprofil: x\n")
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n"], cwd=clean_copy, env=env(), capture_output=True,
                          text=True, timeout=300)
    assert "config/config.yaml: profil: unknown key" in refused(done)
    assert not (clean_copy / "results").exists()


def test_interrupted_training_leaves_no_finished_output(tmp_path):
    workdir = copy_repo(tmp_path)
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--config", "profile=smoke", "machine=interrupted"]
    process = subprocess.Popen(command, cwd=workdir, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    results = workdir / "results/smoke/interrupted"
    deadline = time.monotonic() + 600
    metrics = results / "train/metrics/rank0.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.5)
    assert process.poll() is None, "the run ended before it could be interrupted"
    os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
    process.wait(timeout=120)
    assert not (results / "train/summary.json").exists()
    assert not (results / "parsed").exists()
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--config", "profile=smoke", "machine=interrupted"],
                         cwd=workdir, env=env(), capture_output=True, text=True, timeout=300)
    assert "train" in dry.stdout  # Snakemake will train again rather than trust a partial run
