"""The seed's claims: each kind's verdict logic on numbers that flip it both ways.

The claims are the seed's claim file's entries (config/claims/seed.yaml, varied where a test flips one); the
claimed box's plan is the one plan_claimed_box makes (the claimed profile rendered for the described box, then
planned), with the figure a test turns pinned by hand; the ledger table is compare_ledger's
(zerogate.analysis.ledger_check) over held bytes chosen by each test; the gates' verdicts are gates.evaluate's
on synthetic runs."""

import copy
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import judged_run, no_events, render_profile, settings, synthetic_steps, train_summary
from zerogate.analysis import claims as c
from zerogate.analysis import gates as g
from zerogate.analysis.claim_evidence import Evidence
from zerogate.analysis.claims import judge, rounding_tolerance, stated_figure_holds
from zerogate.analysis.ledger_check import compare, with_peaks
from zerogate.analysis.parse import run_metadata
from zerogate.config.claims import claims_file
from zerogate.config.machines import from_fingerprint, load_description, target_machine
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.plan import DOES_NOT_FIT, MAY_NOT_FIT, Plan
from zerogate.contracts.records import HeldBytes
from zerogate.contracts.run import Deviations, DsConfig, RunSpec
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import (
    CANNOT_JUDGE,
    CLAIM_VERDICTS,
    DOES_NOT_HOLD,
    HOLDS,
    HOLDS_ONLY_WHEN,
    ClaimVerdict,
    GateVerdicts,
)
from zerogate.predict.peak import peak_for_run
from zerogate.predict.planned_run import run_setup
from zerogate.predict.planner import plan_for_run
from zerogate.units import GB, GIB

REPO = Path(__file__).resolve().parents[2]
CLAIMS_DATA = yaml.safe_load((REPO / "config" / "claims" / "seed.yaml").read_text())
CLAIMS = claims_file(CLAIMS_DATA)
CLAIM = {claim.id: claim for claim in CLAIMS.claims}
CLAIMED_MACHINE = load_description(REPO / CLAIMS.claimed_box.machine)
PROFILE = settings("cpu-tiny")  # the run measured here
RULE = SpikeRule.from_settings(PROFILE.stabiliser)
CLAIM_BOX = gpu_fingerprint(("NVIDIA GeForce RTX 5070", 12), ("NVIDIA GeForce RTX 4090", 24))


def with_stated(claim, **changes):
    """``claim`` with its stated figure changed (a claim of the real file, varied where a test flips it)."""
    return claim.model_copy(update={"stated": claim.stated.model_copy(update=changes)})


# ---- the claimed box's plan, as plan_claimed_box makes it ------------------------------------------------


def _render(profile, fingerprint):
    rendered = render_profile(profile, fingerprint)
    return rendered.ds_config, rendered.deviations, rendered.run_spec


@functools.cache
@functools.cache
def _claimed_plan() -> Plan:
    profile = settings(CLAIMS.claimed_box.profile)
    machine, fingerprint = target_machine(str(REPO / CLAIMS.claimed_box.machine), None, "")
    ds_config, _, spec = _render(profile, fingerprint)
    return plan_for_run(spec, ds_config, machine, profile.plan, CLAIMS.claimed_box.profile)


def claimed_plan() -> Plan:
    """The claimed profile (claim-14b) rendered for the described claimed box and planned there (planned once
    per session; each caller gets its own copy)."""
    return _claimed_plan().model_copy(deep=True)


def with_device_terms(plan: Plan, scheme: str, **terms: int) -> Plan:
    """``plan`` with zerogate's device terms of ``scheme`` changed to ``terms`` (bytes)."""
    row = plan.ledger.schemes[scheme]
    zerogate = row.zerogate.model_copy(
        update={"device_terms_bytes": {**row.zerogate.device_terms_bytes, **terms}}
    )
    schemes = {**plan.ledger.schemes, scheme: row.model_copy(update={"zerogate": zerogate})}
    return plan.model_copy(update={"ledger": plan.ledger.model_copy(update={"schemes": schemes})})


def with_dtype(plan: Plan, dtype: str) -> Plan:
    return plan.model_copy(update={"dtype": dtype, "ledger": plan.ledger.model_copy(update={"dtype": dtype})})


def with_small_card_need(plan: Plan, need_bytes: int, interval: tuple[int, int] | None = None) -> Plan:
    """``plan`` with the need on its smallest device set to ``need_bytes``, its interval to ``interval``
    (None: the point alone)."""
    small = plan.smallest_device
    low, high = interval or (need_bytes, need_bytes)
    pinned = small.model_copy(
        update={
            "need_bytes": need_bytes,
            "need_low_bytes": low,
            "need_high_bytes": high,
            "headroom_bytes": small.capacity_bytes - need_bytes,
            "fits": need_bytes <= small.capacity_bytes,
        }
    )
    return plan.model_copy(update={"checks": [pinned if check is small else check for check in plan.checks]})


def with_floor(plan: Plan, optimizer_step_s: float, micro_step_s: float) -> Plan:
    return plan.model_copy(
        update={
            "floor": plan.floor.model_copy(
                update={
                    "optimizer_step_floor_s": optimizer_step_s,
                    "micro_step_floor_s": micro_step_s,
                    "missing": [],
                }
            )
        }
    )


# ---- the run measured here: cpu-tiny, rendered for this CPU machine or for the claimed box
# -------------------


@functools.cache
def _run(on: str) -> tuple[DsConfig, Deviations, RunSpec]:
    return _render(PROFILE, CPU_FINGERPRINT if on == "cpu" else CLAIM_BOX)


@functools.cache
def _counts_and_setup(on: str):
    ds_config, _, spec = _run(on)
    counts, setup, _ = run_setup(spec, ds_config)
    return counts, setup


def ledger_table(held_bytes_per_parameter_share: float, on: str = "cpu") -> LedgerTable:
    """compare_ledger's table of the run measured here (``on``: trained fp32 on this CPU, or fp16 on the
    claimed
    box) when every rank held ``held_bytes_per_parameter_share`` bytes per parameter of its share Phi / N:
    parameters and gradients in the run's precision, Adam's two fp32 moments (8), the fp32 master copy the
    rest."""
    counts, setup = _counts_and_setup(on)
    share = counts.total // setup.ranks
    b = setup.dtype_bytes
    held_bytes = {
        rank: {
            "held": HeldBytes(
                rank=rank,
                world_size=setup.ranks,
                parameters_bytes=b * share,
                gradients_bytes=b * share,
                optimizer_states_bytes=8 * share,
                master_parameters_bytes=int((held_bytes_per_parameter_share - 2 * b - 8) * share),
                parameter_count=share,
                parameter_dtype={"fp32": "float32", "fp16": "float16"}[setup.dtype],
            )
        }
        for rank in range(setup.ranks)
    }
    ds_config, _, spec = _run(on)
    table = with_peaks(
        compare(counts, setup, held_bytes), peak_for_run(spec, ds_config, None), synthetic_steps()
    )
    assert table.held_totals() == {
        rank: int(held_bytes_per_parameter_share * share) for rank in range(setup.ranks)
    }
    return table


# ---- the gates' verdicts of the run measured here --------------------------------------------------------


def _run_spec(steps: int) -> RunSpec:
    spec = _run("cpu")[2]
    return spec.model_copy(update={"training": spec.training.model_copy(update={"optimizer_steps": steps})})


@functools.cache
def _tiny_plan(on: str) -> Plan:
    """cpu-tiny planned on ``on`` (see verdicts), once per session."""
    fingerprint = CLAIM_BOX if on == "claim box" else CPU_FINGERPRINT
    ds_config, _, spec = _run(on)
    return plan_for_run(spec, ds_config, from_fingerprint(fingerprint, "here"), PROFILE.plan, "cpu-tiny")


def verdicts(
    steps=None, faithful: bool = True, run_steps: int = 200, finished: bool = True, step_time: float = 0.5
) -> GateVerdicts:
    """check_gates' verdicts on a synthetic run of ``run_steps`` optimizer steps (``steps``: its records,
    by default a complete, converging run), as the claimed box (``faithful``: the claim's hardware and
    config) or this CPU machine ran it."""
    steps = synthetic_steps(steps=run_steps, step_time=step_time) if steps is None else steps
    summary = train_summary(run_steps) if finished else None
    meta = run_metadata(steps, no_events(), summary, "", run_steps)
    on, fingerprint = ("claim box", CLAIM_BOX) if faithful else ("cpu", CPU_FINGERPRINT)
    ds_config, deviations, spec = _run(on)
    plan = _tiny_plan(on).model_copy(deep=True)
    return judged_run(
        PROFILE.gates,
        steps,
        no_events(),
        summary,
        _run_spec(run_steps),
        deviations,
        fingerprint,
        5,
        RULE,
        plan=plan,
        run_meta=meta,
        ds_config=ds_config,
    )


# ---- the judges --------------------------------------------------------------------------------------


def test_vocabulary_is_fixed_and_conditions_are_required():
    assert (
        ClaimVerdict(verdict=HOLDS_ONLY_WHEN, evidence="e", source="s", condition="x").text
        == "holds only when x"
    )
    assert (
        ClaimVerdict(verdict=CANNOT_JUDGE, evidence="e", source="s", why="y").text
        == "cannot be judged here (y)"
    )
    for bad in (dict(verdict="maybe"), dict(verdict=HOLDS_ONLY_WHEN), dict(verdict=CANNOT_JUDGE)):
        with pytest.raises(ValueError):
            ClaimVerdict(evidence="e", source="s", **bad)


def test_stated_figures_round_at_the_written_precision():
    assert rounding_tolerance(208.6) == pytest.approx(0.05) and rounding_tolerance(14) == pytest.approx(0.5)
    assert stated_figure_holds(16 * 14e9, 208.6, "GiB")  # 208.62 GiB
    assert not stated_figure_holds(16 * 14e9, 208.6, "GB")  # 224 GB
    assert stated_figure_holds(2 * 14e9 / 2, 14, "GB") and not stated_figure_holds(2 * 14e9 / 2, 14, "GiB")


def test_arithmetic_holds_and_flips_on_a_wrong_term():
    claim = CLAIM["ddp_static_memory"]  # 2 + 2 + 12 bytes x 14e9: 28 + 28 + 168 = 224 GB
    assert c.judge_arithmetic(claim, Evidence(claimed_plan()))[0].verdict == HOLDS
    wrong = claim.model_copy(update={"stated": {**claim.stated, "fp32 AdamW state": 160}})
    paper = c.judge_arithmetic(wrong, Evidence(claimed_plan()))[0]
    assert paper.verdict == DOES_NOT_HOLD and "fp32 AdamW state" in paper.evidence.split("wrong: ")[1]


def test_ledger_formula_on_paper_holds_flips_on_a_wrong_figure_and_on_another_accounting():
    claim = CLAIM["zero3_ledger"]  # 16 Phi / N, 104.3 GiB at Phi = 14e9, N = 2
    plan = claimed_plan()
    assert c.judge_ledger_formula(claim, Evidence(plan))[0].verdict == HOLDS
    wrong = with_stated(claim, value=112.0)  # 112 is the GB figure, not GiB
    assert c.judge_ledger_formula(wrong, Evidence(plan))[0].verdict == DOES_NOT_HOLD
    # An accounting with fp32 parameters (twice the 16-bit bytes): the formula holds only for 16-bit ones.
    parameters = plan.ledger.schemes["zero3"].zerogate.device_terms_bytes["parameters"]
    fp32 = with_device_terms(with_dtype(plan, "fp32"), "zero3", parameters=2 * parameters)
    paper = c.judge_ledger_formula(claim, Evidence(fp32))[0]
    assert (
        paper.verdict == HOLDS_ONLY_WHEN
        and "16-bit" in paper.condition
        and "fp32 accounting" in paper.condition
    )


def test_ledger_formula_measured_against_the_held_bytes():
    claim = CLAIM["zero3_ledger"]
    plan = claimed_plan()
    assert ledger_table(16, "claim box").dtype == "fp16" and ledger_table(20).dtype == "fp32"
    assert (
        c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(16, "claim box")))[1].verdict
        == HOLDS
    )
    fp32 = c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(20)))[1]
    assert fp32.verdict == HOLDS_ONLY_WHEN and "20.0 bytes" in fp32.condition
    assert (
        c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(30, "claim box")))[1].verdict
        == DOES_NOT_HOLD
    )
    other = c.judge_ledger_formula(CLAIM["ddp_ledger"], Evidence(plan, ledger=ledger_table(16)))[1]
    assert other.verdict == CANNOT_JUDGE and "ZeRO-3" in other.why and "DDP" in other.why
    assert c.judge_ledger_formula(claim, Evidence(plan))[1].verdict == CANNOT_JUDGE  # no ledger table


def test_offload_formula_holds_only_for_optimizer_offload_and_flips_on_arithmetic():
    claim = CLAIM["zero3_offload"]  # 2 Phi / N = 14 GB at Phi = 14e9, N = 2
    paper, here = c.judge_offload_formula(claim, Evidence(claimed_plan()))
    assert paper.verdict == HOLDS_ONLY_WHEN and "offload_param" in paper.condition
    assert here.verdict == CANNOT_JUDGE
    assert (
        c.judge_offload_formula(with_stated(claim, unit="GiB"), Evidence(claimed_plan()))[0].verdict
        == DOES_NOT_HOLD
    )
    plan = claimed_plan()
    parameters = plan.ledger.schemes["zero3_offload_optimizer"].zerogate.device_terms_bytes["parameters"]
    doubled = with_device_terms(plan, "zero3_offload_optimizer", parameters=2 * parameters)
    assert c.judge_offload_formula(claim, Evidence(doubled))[0].verdict == DOES_NOT_HOLD


def test_communication_ratio_on_paper_and_not_measured():
    claim = CLAIM["zero3_communication"]  # 3 Phi / 2 Phi, stated 1.5
    paper, here = c.judge_communication(claim, Evidence(claimed_plan()))
    assert paper.verdict == HOLDS and here.verdict == CANNOT_JUDGE and "not measured" in here.text
    assert (
        c.judge_communication(with_stated(claim, value=1.2), Evidence(claimed_plan()))[0].verdict
        == DOES_NOT_HOLD
    )


def test_step_time_on_the_floor_and_from_the_gate():
    claim = CLAIM["step_time"]  # 1.82 s, gate optimizer_step_time
    assert claim.stated.value == 1.82 and claim.gate == "optimizer_step_time"
    below_floor = with_floor(claimed_plan(), 1.0, 0.1)
    passed = verdicts(step_time=0.5)
    assert passed.gate("optimizer_step_time").verdict == g.PASS and passed.reproduction.faithful
    below = c.judge_step_time(claim, Evidence(below_floor, gates=passed))
    assert below[0].verdict == CANNOT_JUDGE and below[1].verdict == HOLDS
    elsewhere = c.judge_step_time(claim, Evidence(below_floor, gates=verdicts(faithful=False)))[1]
    assert elsewhere.verdict == HOLDS_ONLY_WHEN
    assert "not the claim's model on the claimed box" in elsewhere.condition
    failed = verdicts(step_time=2.5)
    assert failed.gate("optimizer_step_time").verdict == g.FAIL
    micro = c.judge_step_time(claim, Evidence(with_floor(claimed_plan(), 5.0, 0.1), gates=failed))
    assert micro[0].verdict == HOLDS_ONLY_WHEN and "micro-step" in micro[0].condition
    assert micro[1].verdict == DOES_NOT_HOLD
    never = c.judge_step_time(claim, Evidence(with_floor(claimed_plan(), 5.0, 2.0)))
    assert never[0].verdict == DOES_NOT_HOLD and never[1].verdict == CANNOT_JUDGE  # no gates given


def test_peak_memory_flips_with_the_prediction_and_the_unit():
    claim = CLAIM["small_card_peak"]  # below 7.42 GB, on the smallest card
    assert claimed_plan().smallest_device.device == "NVIDIA GeForce RTX 5070"
    assert (
        c.judge_peak_memory(claim, Evidence(with_small_card_need(claimed_plan(), int(7.0 * GB))))[0].verdict
        == HOLDS
    )
    # Over 7.42 GB, under 7.42 GiB (7.97 GB).
    paper = c.judge_peak_memory(claim, Evidence(with_small_card_need(claimed_plan(), int(7.6 * GB))))[0]
    assert paper.verdict == HOLDS_ONLY_WHEN and "GiB" in paper.condition
    over = with_small_card_need(claimed_plan(), int(8.0 * GB))
    assert c.judge_peak_memory(claim, Evidence(over))[0].verdict == DOES_NOT_HOLD
    # The point under the claim, its interval across it: the interval decides, either way.
    across = with_small_card_need(claimed_plan(), int(7.0 * GB), (int(6.0 * GB), int(9.0 * GB)))
    judged = c.judge_peak_memory(claim, Evidence(across))[0]
    assert (judged.verdict, judged.why) == (CANNOT_JUDGE, "the claim lies inside the predicted interval")
    above = with_small_card_need(claimed_plan(), int(9.0 * GB), (int(8.0 * GB), int(11.0 * GB)))
    assert c.judge_peak_memory(claim, Evidence(above))[0].verdict == DOES_NOT_HOLD


def test_convergence_from_the_gates_and_the_run_length():
    claim = CLAIM["convergence"]  # 1000 steps, gates loss_convergence and zero_nonfinite
    ok = Evidence(claimed_plan(), gates=verdicts(run_steps=40))
    assert c.judge_convergence(claim.model_copy(update={"steps": 40}), ok)[1].verdict == HOLDS
    assert c.judge_convergence(claim, ok)[1].verdict == HOLDS_ONLY_WHEN
    steps = synthetic_steps(steps=40)
    steps.loc[steps["step"] == 30, "loss"] = float("nan")
    bad = verdicts(steps, run_steps=40)
    assert bad.gate("zero_nonfinite").verdict == g.FAIL
    shorter = claim.model_copy(update={"steps": 40})
    assert c.judge_convergence(shorter, Evidence(claimed_plan(), gates=bad))[1].verdict == DOES_NOT_HOLD


def test_the_convergence_claim_counts_the_steps_each_rank_recorded():
    """A complete run of the claimed 1000 steps holds the convergence claim; a truncated one does not, and its
    evidence says how many optimizer steps each rank recorded (counted, never read off the highest step)."""
    claim = CLAIM["convergence"]
    assert claim.steps == 1000
    complete = verdicts(run_steps=1000)
    assert complete.records.steps_per_rank == {0: 1000, 1: 1000}
    here = c.judge_convergence(claim, Evidence(claimed_plan(), gates=complete))[1]
    assert here.verdict == HOLDS and "1000 optimizer steps per rank (claimed 1000)" in here.evidence
    assert "loss_convergence: PASS" in here.evidence and "zero_nonfinite: PASS" in here.evidence
    # Rank 1 stopped after 600 steps and the run wrote no summary.
    steps = synthetic_steps(steps=1000)
    truncated = verdicts(
        steps[~((steps["rank"] == 1) & (steps["step"] > 600))], run_steps=1000, finished=False
    )
    assert truncated.records.steps_per_rank == {0: 1000, 1: 600}
    here = c.judge_convergence(claim, Evidence(claimed_plan(), gates=truncated))[1]
    assert here.verdict == DOES_NOT_HOLD and "600 optimizer steps per rank (claimed 1000)" in here.evidence
    assert "zero_nonfinite: FAIL" in here.evidence
    # Rank 1 recorded steps 1-10 and the last one: 11 steps, whatever its highest step says.
    gapped = verdicts(
        steps[(steps["rank"] == 0) | (steps["step"] <= 10) | (steps["step"] == 1000)], run_steps=1000
    )
    here = c.judge_convergence(claim, Evidence(claimed_plan(), gates=gapped))[1]
    assert here.verdict == DOES_NOT_HOLD and "11 optimizer steps per rank (claimed 1000)" in here.evidence
    # A complete run shorter than claimed holds only for its own length.
    short = c.judge_convergence(claim, Evidence(claimed_plan(), gates=verdicts(run_steps=200)))[1]
    assert short.verdict == HOLDS_ONLY_WHEN
    assert short.condition == "the run is 200 steps long: 1000 were claimed, not run here"
    assert "200 optimizer steps per rank (claimed 1000)" in short.evidence


def test_hardware_fact_flips_with_the_described_memory():
    claim = CLAIM["hardware"]  # an RTX 5070 8 GB and an RTX 4090 24 GB
    twelve = CLAIMED_MACHINE  # the desktop RTX 5070 has 12 GB
    eight = CLAIMED_MACHINE.model_copy(
        update={
            "gpus": [
                gpu.model_copy(update={"memory_total_bytes": 8 * GIB}) if "RTX 5070" in gpu.name else gpu
                for gpu in CLAIMED_MACHINE.gpus
            ]
        }
    )
    paper = c.judge_hardware(claim, Evidence(claimed_plan(), claimed_machine=twelve))[0]
    assert paper.verdict == DOES_NOT_HOLD and "stated 8 GB" in paper.evidence
    assert c.judge_hardware(claim, Evidence(claimed_plan(), claimed_machine=eight))[0].verdict == HOLDS


def test_every_claim_of_the_real_file_is_judged_with_a_known_kind():
    claims = copy.deepcopy(CLAIMS_DATA)
    from snakemake.utils import validate

    validate(copy.deepcopy(claims), str(REPO / "config" / "schemas" / "claims.schema.json"))
    judged = judge(
        claims_file(claims),
        Evidence(
            claimed_plan(),
            ledger=ledger_table(20),
            claimed_machine=CLAIMED_MACHINE,
            gates=verdicts(run_steps=1000),
        ),
        "seed",
    )
    assert judged.claim == "seed" and judged.source.startswith("docs/claim/claim.md")
    assert [v.id for v in judged.claims] == [claim["id"] for claim in claims["claims"]]
    by_id = {v.id: v for v in judged.claims}
    assert by_id["hardware"].on_paper.verdict == DOES_NOT_HOLD  # the RTX 5070 is a 12 GB card
    assert by_id["zero3_communication"].measured_here.text.startswith("cannot be judged here (not measured")
    assert by_id["convergence"].measured_here.verdict == HOLDS
    for v in judged.claims:
        assert v.on_paper.verdict in CLAIM_VERDICTS and v.measured_here.verdict in CLAIM_VERDICTS
    # As claims/verdicts.json holds them, read back.
    from zerogate.contracts.verdicts import ClaimVerdicts

    assert ClaimVerdicts.parse(json.loads(json.dumps(judged.as_json())), "claims/verdicts.json") == judged


def test_analysis_claims_never_imports_torch():
    import subprocess
    import sys

    code = "import sys, zerogate.analysis.claims; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_claims_file_is_an_input_of_the_judges_only():
    """Editing a claim re-judges (judge_claim_on_paper on paper, judge_seed_claims measured, then the report),
    never re-plans or retrains: only the two judges read the claim file, and nothing that plans, measures or
    trains depends on it, however indirectly. The claim's results sit under claims/seed/."""
    from tests.unit.test_workflow import planned_jobs, snakemake

    claim = "config/claims/seed.yaml"
    done = snakemake("-n", "--config", "profile=smoke", "machine=dry-run")
    assert planned_jobs(done)["judge_seed_claims"] == 1 and planned_jobs(done)["plan_claimed_box"] == 1
    assert "results/smoke/dry-run/claims/seed/verdicts.json" in done.stdout
    jobs, job = [], None
    for line in done.stdout.splitlines():
        if found := re.match(r"^(?:local)?rule (\w+):", line):
            job = {"rule": found[1], "input": set(), "output": set()}
            jobs.append(job)
        elif job and (found := re.match(r"^\s+(input|output): (.*)$", line)):
            job[found[1]] = {path.strip() for path in found[2].split(",")}
    readers = sorted(j["rule"] for j in jobs if claim in j["input"])
    assert readers == ["judge_claim_on_paper", "judge_seed_claims"], readers
    made, downstream = {claim}, set()
    while grown := [j for j in jobs if j["rule"] not in downstream and j["input"] & made]:
        for j in grown:
            downstream.add(j["rule"])
            made |= j["output"]
    judges = {"judge_claim_on_paper", "judge_seed_claims", "write_report", "register_run", "all"}
    assert downstream <= judges, downstream
    assert downstream.isdisjoint(
        {
            "render_deepspeed_config",
            "plan_run",
            "replan_with_measured_compute",
            "plan_claimed_box",
            "approve_plan",
            "train",
            "parse_logs",
            "check_gates",
        }
    )


def test_the_planning_docs_state_the_claimed_boxs_figures_as_the_planner_gives_them():
    """docs/planning.md's paragraph on the claimed box quotes the small card's need, its tensor peak, the need
    with activation checkpointing and FSDP2's with its offload: each as format_bytes prints this plan's."""
    from zerogate.units import format_bytes

    plan = claimed_plan()
    docs = " ".join((REPO / "docs/planning.md").read_text().split())
    small = plan.smallest_device
    zerogate = plan.ledger.schemes[plan.ledger.scheme].zerogate
    checkpointing = next(change for change in plan.device_changes if change.settings.activation_checkpointing)
    fsdp2_offload = next(peer for peer in plan.peers if peer.variant == "fsdp2-offload")
    fsdp2_small = min(
        (check for check in fsdp2_offload.checks if check.rank is not None),
        key=lambda check: check.capacity_bytes,
    )
    stated = {
        "small card": format_bytes(small.need_bytes),
        "tensor peak": format_bytes(zerogate.device_tensor_peak_per_rank_bytes),
        "with checkpointing": format_bytes(checkpointing.smallest_device_need_bytes),
        "FSDP2 with its offload": format_bytes(fsdp2_small.need_bytes),
    }
    # format_bytes gives 'x GiB (y GB)'; the paragraph states the GiB figure (and for two the GB one beside
    # it).
    stated = {what: figure.split(" (")[0] for what, figure in stated.items()}
    # The small card's 12 GiB lies inside ZeRO-3's need's interval and below all of FSDP2's with its offload.
    assert (small.verdict, fsdp2_small.verdict) == (MAY_NOT_FIT, DOES_NOT_FIT)
    for what, figure in stated.items():
        assert figure in docs, (what, figure)
