"""The whole DAG on the smoke profile (tests/integration/conftest.py runs it once per session), re-judging a
finished run without retraining, and the refusals of bad input at DAG-build time (no job runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.pipeline import MACHINE, STRAGGLER_DELAY_S, copy_repo, env, refused, snakemake
from tests.unit.helpers import settings
from zerogate import __version__
from zerogate.analysis.columns import COLLECTIVES_TIME, DEVICE_PEAK, LOSS, STEP_TIME
from zerogate.analysis.parse import read_steps
from zerogate.analysis.rank_balance import rank_balance
from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.plan import Plan
from zerogate.contracts.report import Provenance, RunRegistry
from zerogate.contracts.run import Deviations
from zerogate.contracts.verdicts import GATE_OUTCOMES, ClaimVerdicts, GateVerdicts

pytestmark = pytest.mark.integration


def test_every_gate_has_definition_value_threshold_and_verdict(smoke_run, smoke_profile):
    results = smoke_run.results
    verdicts = GateVerdicts.read(results / "gates/verdicts.json")
    assert [g.name for g in verdicts.gates] == [g.name for g in settings(smoke_profile).gates]
    # Not measurable on the CPU default: fp32 has no loss scaler to skip steps.
    unmeasurable = {"overflow_skip_fraction"}
    for gate in verdicts.gates:
        assert gate.definition and gate.threshold is not None
        assert gate.verdict in GATE_OUTCOMES
        if gate.name in unmeasurable:
            assert gate.verdict == "NOT MEASURED" and gate.reason, gate
        else:
            assert gate.measured is not None, gate
    assert verdicts.gate("zero_nonfinite").verdict == "PASS"
    assert verdicts.gate("loss_convergence").verdict == "PASS"
    # The planner's floor for this machine is known, so time / floor is measured (>= 0, a ratio).
    assert verdicts.gate("step_time_over_physical_floor").measured > 0
    assert verdicts.reproduction.faithful is False
    assert any("fp16.enabled" in r for r in verdicts.reproduction.reasons)


def test_both_ranks_trained_every_step_and_loss_fell(smoke_run):
    results = smoke_run.results
    steps = read_steps(results / "parsed/steps.parquet")
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert (steps.groupby("rank")["step"].apply(sorted).apply(list) == [list(range(1, 41))] * 2).all()
    loss = steps[steps["rank"] == 0].sort_values("step")[LOSS]
    assert loss.notna().all() and (loss < float("inf")).all()
    assert loss.tail(5).mean() < loss.head(5).mean()
    assert (steps[STEP_TIME] > 0).all() and (steps[DEVICE_PEAK] > 0).all()


def test_every_step_records_its_collective_time_and_the_report_says_who_waits(smoke_run, smoke_profile):
    """The unperturbed run: both ranks record their time in collectives at every step (ZeRO-3 meets in every
    micro-step, so many calls), the parts add up, and the Ranks section shows both ranks without a straggler
    as slow as the one injected in the two-node run (tests/integration/test_ranks.py)."""
    results = smoke_run.results
    steps = read_steps(results / "parsed/steps.parquet")
    training = settings(smoke_profile).training
    accumulation = training.gradient_accumulation_steps
    assert (steps[COLLECTIVES_TIME] > 0).all()
    assert (steps[COLLECTIVES_TIME] < steps[STEP_TIME]).all()
    assert (
        steps["collective_calls"] > accumulation
    ).all()  # more than the boundary: inside the micro-steps too
    balance = rank_balance(steps, training.warmup_steps_excluded, world_size=2)
    assert balance.measured and balance.ranks == [0, 1], balance.problems
    assert all(wait >= 0 for wait in balance.wait.values())
    assert balance.excess < STRAGGLER_DELAY_S * accumulation / 2, balance.evidence()  # half the straggler's
    (page,) = [p.read_text() for p in (results / "report").glob("zerogate-v*.html")]
    assert "<h2 id='ranks'>Ranks</h2>" in page and "id='ranks-table'" in page
    assert page.index("<h2 id='ranks'>") < page.index("<h2>Figures</h2>")
    assert RunRegistry.read(results / "registry.json").summary.straggler_rank == balance.straggler


def test_ledger_matches_what_each_rank_held_within_5_percent(smoke_run):
    results = smoke_run.results
    table = LedgerTable.read(results / "ledger/ledger_vs_measured.json")
    assert {r.rank for r in table.rows} == {0, 1}
    assert table.within_5_percent is True, table.rows
    assert Plan.read(results / "plan/plan.json").fits is True


def test_each_predicted_peak_level_is_set_against_its_measurement(smoke_run):
    """The CPU run's tensor peak against the live tensors of the step sampled after training (with and
    without the config-sized gradient buckets) and its resident set against VmHWM, per rank, with errors."""
    table = LedgerTable.read(smoke_run.results / "ledger/ledger_vs_measured.json")
    levels = {(r.rank, r.level): r for r in table.levels}
    assert {level for _, level in levels} == {"tensor", "tensor without the gradient buckets", "resident_set"}
    for rank in (0, 1):
        for level in ("tensor", "tensor without the gradient buckets"):
            assert abs(levels[rank, level].error_percent) <= 10, levels[rank, level]
        assert abs(levels[rank, "resident_set"].error_percent) <= 15, levels[rank, "resident_set"]
    assert set(table.level_max_abs_error_percent) == {
        "tensor",
        "tensor without the gradient buckets",
        "resident_set",
    }


def test_render_records_deviations_and_no_auto(smoke_run):
    results = smoke_run.results
    ds_config = (results / "deepspeed/ds_config.json").read_text()
    assert '"auto"' not in ds_config
    deviations = Deviations.read(results / "deepspeed/deviations.json").deviations
    assert {"fp16.enabled", "zero_optimization.reduce_bucket_size"} <= {d.path for d in deviations}


def test_report_is_versioned_and_names_its_provenance(smoke_run):
    workdir, results = smoke_run.workdir, smoke_run.results
    reports = list((results / "report").glob("zerogate-v*.html"))
    assert len(reports) == 1
    assert reports[0].name.startswith(f"zerogate-v{__version__}-smoke-{MACHINE}-")
    page = reports[0].read_text()
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=workdir, capture_output=True, text=True
    ).stdout.strip()
    provenance = Provenance.read(results / "provenance.json")
    dataset_hash = DatasetManifest.read(results / "dataset/manifest.json").content_sha256
    assert provenance.git.at_training.commit == commit
    for fact in (commit, provenance.config_hash, dataset_hash, "deepspeed", "0.19.8"):
        assert fact in page
    assert page.index("id='verdicts'") < page.index("<h2>Figures</h2>")


def test_rerunning_check_gates_does_not_retrain(smoke_run, tmp_path):
    rerun_check_gates(*smoke_run.copy(tmp_path / "run"))


def rerun_check_gates(workdir, results):
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


def test_editing_a_gate_threshold_rejudges_without_retraining_and_strict_fails_on_it(smoke_run, tmp_path):
    # One re-judged run serves both: the edited threshold must re-judge without retraining, and with
    # strict=True the FAIL it produces must fail the invocation while the verdicts and report stay.
    edit_threshold_with_strict(*smoke_run.copy(tmp_path / "run"))


def edit_threshold_with_strict(workdir, results):
    profile = workdir / "config/profiles/smoke.yaml"
    # The profile's own gates (every key, e.g. the convergence gate's settings), the first one made
    # impossible.
    strict_time = resolve_profile(
        load_profile_chain(workdir / "config/profiles", "smoke", "config/config.yaml", "profile")
    )["gates"]
    strict_time[0]["threshold"] = 0.001  # no machine makes an optimizer step in a millisecond
    trained_at = (results / "train/summary.json").stat().st_mtime_ns
    profile.write_text(profile.read_text() + "gates: " + json.dumps(strict_time) + "\n")

    done = snakemake(workdir, "strict=True")  # one more --config entry
    assert done.returncode != 0
    verdicts = GateVerdicts.read(results / "gates/verdicts.json").gates
    failed = [g.name for g in verdicts if g.verdict == "FAIL"]
    assert f"strict: {len(failed)} gate(s) FAIL ({failed[0]}: " in done.stderr  # each FAIL with its reason
    assert verdicts[0].threshold == 0.001 and verdicts[0].verdict == "FAIL"  # kept for the user to read
    assert not list((results / "gates").glob("strict-*.passed"))
    assert (results / "train/summary.json").stat().st_mtime_ns == trained_at
    assert len(list((results / "report").glob("zerogate-v*.html"))) == 2  # the earlier report is kept

    assert snakemake(workdir).returncode == 0  # strict is off by default
    assert (results / "train/summary.json").stat().st_mtime_ns == trained_at


def test_default_report_opens_in_headless_chromium(smoke_run, tmp_path):
    from tests.browser import chromium, dump_dom, screenshot

    if chromium() is None:
        pytest.skip("needs Debian's chromium (.ci/run installs it)")
    report = sorted((smoke_run.results / "report").glob("zerogate-v*.html"))[0]
    dom = dump_dom(report)
    assert '<table id="verdicts">' in dom and dom.index('id="verdicts"') < dom.index("<h2>Figures</h2>")
    screenshot(report, tmp_path / "report.png")


def test_run_registry_lists_gates_figures_and_provenance(smoke_run):
    results = smoke_run.results
    registry = RunRegistry.read(results / "registry.json")
    verdicts = GateVerdicts.read(results / "gates/verdicts.json")
    assert [g.verdict for g in registry.gates] == [g.verdict for g in verdicts.gates]
    assert (
        registry.provenance.dataset_sha256
        == DatasetManifest.read(results / "dataset/manifest.json").content_sha256
    )
    for figure in registry.files.figures.values():
        assert (smoke_run.workdir / figure).exists()


BAD_PROFILES = {
    "negative step count": (
        "training: {optimizer_steps: -5}",
        "training.optimizer_steps: -5 is less than the minimum of 1",
    ),
    "misspelt key": ("training: {optimizer_stepz: 5}", "training.optimizer_stepz: unknown key"),
    "wrong type": (
        "training: {optimizer_steps: many}",
        "training.optimizer_steps: 'many' is not of type 'integer'",
    ),
    "geometry that does not multiply out": (
        "training: {train_batch_size: 20}",
        "training.train_batch_size: 20 is not",
    ),
    "missing template": (
        "deepspeed: {template: config/deepspeed/nope.json}",
        "deepspeed.template: no such file",
    ),
    "nested unknown key": ("model: {hidden_sise: 32}", "model.hidden_sise: unknown key"),
}


def dry_run(workdir, *args, profile="smoke"):
    """`snakemake -n`: the profile and config checks run while the DAG is built, so a bad input is refused
    by a dry run exactly as by a real one, and nothing can start training."""
    return snakemake(workdir, *args, targets=("-n",), profile=profile, timeout=300)


def bare_snakemake(workdir, *args):
    """Snakemake with no --config at all: config/config.yaml alone."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def profile_name(case: str) -> str:
    return "bad-" + case.replace(" ", "-")


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """Every refusal case and the lint, side by side: each is one Snakemake start-up (seconds of CPU, no job).
    Returns (clean copy, copy with a misspelt config.yaml, {case: CompletedProcess})."""
    clean = copy_repo(tmp_path_factory.mktemp("zerogate-bad"))
    for case, (body, _) in BAD_PROFILES.items():
        (clean / f"config/profiles/{profile_name(case)}.yaml").write_text(f"extends: smoke\n{body}\n")
    typo = copy_repo(tmp_path_factory.mktemp("zerogate-config-typo"))
    (typo / "config/config.yaml").write_text("profile: smoke\nmachine: auto\nprofil: x\n")
    calls = {case: (dry_run, clean, (), {"profile": profile_name(case)}) for case in BAD_PROFILES}
    calls |= {
        "unknown profile": (dry_run, clean, (), {"profile": "nope"}),
        "unknown config key": (dry_run, clean, ("bogus=1",), {}),
        "config.yaml typo": (bare_snakemake, typo, ("-n",), {}),
        "lint": (bare_snakemake, clean, ("--lint",), {}),
    }
    with ThreadPoolExecutor(max_workers=max(1, min(len(calls), os.cpu_count() or 1))) as pool:
        futures = {
            case: pool.submit(call, workdir, *args, **kwargs)
            for case, (call, workdir, args, kwargs) in calls.items()
        }
        done = {case: future.result() for case, future in futures.items()}
    return clean, typo, done


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_is_refused_with_file_and_key(checks, case):
    clean, _, done = checks
    _, expected = BAD_PROFILES[case]
    line = refused(done[case])
    assert f"config/profiles/{profile_name(case)}.yaml: {expected}" in line
    assert not (clean / "results").exists()


def test_unknown_profile_and_unknown_config_key_are_refused(checks):
    clean, typo, done = checks
    line = refused(done["unknown profile"])
    assert "profile: unknown profile 'nope'" in line and "smoke" in line
    assert "--config: bogus: unknown key" in refused(done["unknown config key"])
    assert "config/config.yaml: profil: unknown key" in refused(done["config.yaml typo"])
    assert not (clean / "results").exists() and not (typo / "results").exists()


def test_workflow_passes_snakemake_lint(checks):
    done = checks[2]["lint"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Congratulations" in done.stdout + done.stderr


def test_the_plan_target_and_the_report_judge_every_seed_claim_on_paper_in_the_same_words(smoke_run):
    import html
    import re

    results = smoke_run.results
    on_paper = (results / "claims/seed/on_paper.txt").read_text()
    # The statements come first; where the time goes on the claimed box follows them.
    statements, time_goes = on_paper.split("\nthe claimed box, ", 1)
    assert "predicted optimizer step: " in time_goes and "where the time goes" in time_goes
    in_plan = dict(re.findall(r"^  (\w+): (.*)$", statements, flags=re.MULTILINE))
    (page,) = [html.unescape(p.read_text()) for p in (results / "report").glob("zerogate-v*.html")]
    in_report = dict(
        re.findall(r"<tr id='claim-([^']+)'><td>.*?</td><td class='claim-[^']*'><b>(.*?)</b>", page, re.S)
    )
    judged = ClaimVerdicts.read(results / "claims/seed/verdicts.json")
    assert set(in_plan) == set(in_report) == {c.id for c in judged.claims}
    assert in_plan == in_report
    assert in_plan == {c.id: c.on_paper.text for c in judged.claims}
