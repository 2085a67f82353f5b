"""The seed's claims: each kind's verdict logic on hand-made numbers that flip it both ways."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from zerogate.analysis import claims as c
from zerogate.analysis.claims import (CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS, HOLDS_ONLY_WHEN, Evidence, Verdict, judge,
                                      rounding_tolerance, stated_figure_holds)
from zerogate.units import GB, GIB

REPO = Path(__file__).resolve().parents[2]
PHI, N = 1000, 2


def scheme(device: dict, host: dict | None = None, deepspeed: int | None = None) -> dict:
    return {"paper": {"device_per_rank(bytes)": 0},
            "deepspeed": None if deepspeed is None else {"device_per_rank(bytes)": deepspeed, "host_per_node(bytes)": 0},
            "zerogate": {"device_terms(bytes)": device, "host_terms_per_rank(bytes)": host or {}}}


def claimed_plan(**changes) -> dict:
    share = PHI // N
    plan = {
        "machine": "box", "dtype": "fp16", "scheme": "zero3_offload_all", "ranks": N,
        "ledger": {"parameters": PHI, "ranks": N, "schemes": {
            "ddp": scheme({"parameters": 2 * PHI, "gradients": 2 * PHI, "master_parameters": 4 * PHI,
                           "optimizer_states": 8 * PHI}),
            "zero3": scheme({"parameters": 2 * share, "gradients": 2 * share, "master_parameters": 4 * share,
                             "optimizer_states": 8 * share}, deepspeed=18 * share),
            "zero3_offload_optimizer": scheme({"parameters": 2 * share}, {"optimizer_states": 8 * share}, 2 * share + 40),
            "zero3_offload_all": scheme({"persistent_parameters": 10, "gathered_parameters": 40},
                                        {"parameters": 2 * share}, 40),
        }},
        "checks": [{"rank": 0, "device": "small card", "need(bytes)": int(7.0 * GB), "capacity(bytes)": 8 * GIB},
                   {"rank": 1, "device": "big card", "need(bytes)": int(7.0 * GB), "capacity(bytes)": 24 * GIB},
                   {"rank": None, "device": "host", "need(bytes)": 1, "capacity(bytes)": 2}],
        "optimizer_step_floor(s)": 1.0, "micro_step_floor(s)": 0.1, "floor": {"missing": []},
    }
    plan.update(changes)
    return plan


def ledger_table(held_per_rank: int, dtype: str = "fp32", scheme_name: str = "zero3_offload_all") -> dict:
    return {"scheme": scheme_name, "parameters": PHI, "ranks": N, "dtype": dtype,
            "rows": [{"rank": r, "term": "model_states_total", "measured(bytes)": held_per_rank} for r in range(N)]}


def gates(faithful: bool = True, **verdicts) -> dict:
    return {"reproduction": {"faithful": faithful, "reasons": [] if faithful else ["no GPU"]}, "gates": [{"name": name, "verdict": v, "measured": 1.0, "unit": "s", "comparison": "<=", "threshold": 1.82,
                       "evidence": {"steps_per_rank": {"0": 40, "1": 40}}} for name, v in verdicts.items()]}


def test_vocabulary_is_fixed_and_conditions_are_required():
    assert Verdict(HOLDS_ONLY_WHEN, "e", "s", condition="x").text == "holds only when x"
    assert Verdict(CANNOT_JUDGE, "e", "s", why="y").text == "cannot be judged here (y)"
    for bad in (dict(verdict="maybe"), dict(verdict=HOLDS_ONLY_WHEN), dict(verdict=CANNOT_JUDGE)):
        with pytest.raises(ValueError):
            Verdict(evidence="e", source="s", **bad)


def test_stated_figures_round_at_the_written_precision():
    assert rounding_tolerance(208.6) == pytest.approx(0.05) and rounding_tolerance(14) == pytest.approx(0.5)
    assert stated_figure_holds(16 * 14e9, 208.6, "GiB")  # 208.62 GiB
    assert not stated_figure_holds(16 * 14e9, 208.6, "GB")  # 224 GB
    assert stated_figure_holds(2 * 14e9 / 2, 14, "GB") and not stated_figure_holds(2 * 14e9 / 2, 14, "GiB")


def test_arithmetic_holds_and_flips_on_a_wrong_term():
    claim = {"phi": 14e9, "unit": "GB", "terms": {"w": 2, "adam": 12}, "stated": {"w": 28, "adam": 168, "total": 196}}
    assert c.judge_arithmetic(claim, Evidence(claimed_plan()))[0].verdict == HOLDS
    claim["stated"]["adam"] = 160
    paper = c.judge_arithmetic(claim, Evidence(claimed_plan()))[0]
    assert paper.verdict == DOES_NOT_HOLD and "adam" in paper.evidence


def test_ledger_formula_on_paper_holds_flips_on_a_wrong_figure_and_on_another_accounting():
    claim = {"scheme": "zero3", "replicated": 0, "sharded": 16, "stated": {"value": 104.3, "unit": "GiB", "phi": 14e9, "ranks": 2}}
    assert c.judge_ledger_formula(claim, Evidence(claimed_plan()))[0].verdict == HOLDS
    wrong = {**claim, "stated": {**claim["stated"], "value": 112.0}}  # 112 is the GB figure, not GiB
    assert c.judge_ledger_formula(wrong, Evidence(claimed_plan()))[0].verdict == DOES_NOT_HOLD
    fp32 = claimed_plan(dtype="fp32")
    fp32["ledger"]["schemes"]["zero3"]["zerogate"]["device_terms(bytes)"]["parameters"] *= 2
    paper = c.judge_ledger_formula(claim, Evidence(fp32))[0]
    assert paper.verdict == HOLDS_ONLY_WHEN and "16-bit" in paper.condition


def test_ledger_formula_measured_against_the_held_bytes():
    claim = {"scheme": "zero3", "replicated": 0, "sharded": 16}
    plan = claimed_plan()
    assert c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(16 * PHI // N, "fp16")))[1].verdict == HOLDS
    fp32 = c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(20 * PHI // N)))[1]
    assert fp32.verdict == HOLDS_ONLY_WHEN and "20.0 bytes" in fp32.condition
    assert c.judge_ledger_formula(claim, Evidence(plan, ledger=ledger_table(30 * PHI // N, "fp16")))[1].verdict == DOES_NOT_HOLD
    other = c.judge_ledger_formula({**claim, "scheme": "ddp", "replicated": 16, "sharded": 0},
                                   Evidence(plan, ledger=ledger_table(1)))[1]
    assert other.verdict == CANNOT_JUDGE and "ZeRO-3" in other.why


def test_offload_formula_holds_only_for_optimizer_offload_and_flips_on_arithmetic():
    claim = {"sharded": 2, "stated": {"value": 14, "unit": "GB", "phi": 14e9, "ranks": 2}}
    paper, here = c.judge_offload_formula(claim, Evidence(claimed_plan()))
    assert paper.verdict == HOLDS_ONLY_WHEN and "offload_param" in paper.condition
    assert here.verdict == CANNOT_JUDGE
    assert c.judge_offload_formula({**claim, "stated": {**claim["stated"], "unit": "GiB"}},
                                   Evidence(claimed_plan()))[0].verdict == DOES_NOT_HOLD
    plan = claimed_plan()
    plan["ledger"]["schemes"]["zero3_offload_optimizer"]["zerogate"]["device_terms(bytes)"]["parameters"] = 4 * PHI // N
    assert c.judge_offload_formula(claim, Evidence(plan))[0].verdict == DOES_NOT_HOLD


def test_communication_ratio_on_paper_and_not_measured():
    claim = {"ddp_volume": 2, "zero3_volume": 3, "stated": {"value": 1.5}}
    paper, here = c.judge_communication(claim, Evidence(claimed_plan()))
    assert paper.verdict == HOLDS and here.verdict == CANNOT_JUDGE and "not measured" in here.text
    assert c.judge_communication({**claim, "stated": {"value": 1.2}}, Evidence(claimed_plan()))[0].verdict == DOES_NOT_HOLD


def test_step_time_on_the_floor_and_from_the_gate():
    claim = {"stated": {"value": 1.82}, "gate": "optimizer_step_time"}
    below = c.judge_step_time(claim, Evidence(claimed_plan(), gates=gates(optimizer_step_time="PASS")))
    assert below[0].verdict == CANNOT_JUDGE and below[1].verdict == HOLDS
    elsewhere = c.judge_step_time(claim, Evidence(claimed_plan(), gates=gates(False, optimizer_step_time="PASS")))[1]
    assert elsewhere.verdict == HOLDS_ONLY_WHEN and "not the claim's 14B model" in elsewhere.condition
    micro = c.judge_step_time(claim, Evidence(claimed_plan(**{"optimizer_step_floor(s)": 5.0}),
                                              gates=gates(optimizer_step_time="FAIL")))
    assert micro[0].verdict == HOLDS_ONLY_WHEN and "micro-step" in micro[0].condition
    assert micro[1].verdict == DOES_NOT_HOLD
    never = c.judge_step_time(claim, Evidence(claimed_plan(**{"optimizer_step_floor(s)": 5.0, "micro_step_floor(s)": 2.0})))
    assert never[0].verdict == DOES_NOT_HOLD and never[1].verdict == CANNOT_JUDGE  # no gates given


def test_peak_memory_flips_with_the_prediction_and_the_unit():
    claim = {"stated": {"value": 7.42, "unit": "GB"}, "gate": "peak_memory_smallest_device"}
    assert c.judge_peak_memory(claim, Evidence(claimed_plan()))[0].verdict == HOLDS  # 7.0 GB < 7.42 GB
    plan = claimed_plan()
    plan["checks"][0]["need(bytes)"] = int(7.6 * GB)  # over 7.42 GB, under 7.42 GiB (7.97 GB)
    paper = c.judge_peak_memory(claim, Evidence(plan))[0]
    assert paper.verdict == HOLDS_ONLY_WHEN and "GiB" in paper.condition
    plan["checks"][0]["need(bytes)"] = int(8.0 * GB)
    assert c.judge_peak_memory(claim, Evidence(plan))[0].verdict == DOES_NOT_HOLD


def test_convergence_from_the_gates_and_the_run_length():
    claim = {"steps": 40, "gates": ["loss_convergence", "zero_nonfinite"]}
    ok = Evidence(claimed_plan(), gates=gates(loss_convergence="PASS", zero_nonfinite="PASS"))
    assert c.judge_convergence(claim, ok)[1].verdict == HOLDS
    assert c.judge_convergence({**claim, "steps": 1000}, ok)[1].verdict == HOLDS_ONLY_WHEN
    bad = Evidence(claimed_plan(), gates=gates(loss_convergence="PASS", zero_nonfinite="FAIL"))
    assert c.judge_convergence(claim, bad)[1].verdict == DOES_NOT_HOLD


def test_hardware_fact_flips_with_the_described_memory():
    claim = {"gpus": [{"name": "RTX 5070", "memory": 8, "unit": "GB"}]}
    twelve = {"name": "box", "gpus": [{"name": "NVIDIA GeForce RTX 5070", "memory_total_bytes": 12 * GIB}]}
    eight = {"name": "box", "gpus": [{"name": "NVIDIA GeForce RTX 5070", "memory_total_bytes": 8 * GIB}]}
    assert c.judge_hardware(claim, Evidence(claimed_plan(), claimed_machine=twelve))[0].verdict == DOES_NOT_HOLD
    assert c.judge_hardware(claim, Evidence(claimed_plan(), claimed_machine=eight))[0].verdict == HOLDS


def test_every_claim_of_the_real_file_is_judged_with_a_known_kind():
    claims = yaml.safe_load((REPO / "config" / "claims.yaml").read_text())
    from snakemake.utils import validate
    validate(copy.deepcopy(claims), str(REPO / "config" / "schemas" / "claims.schema.yaml"))
    machine = yaml.safe_load((REPO / claims["claimed_box"]["machine"]).read_text())
    plan = claimed_plan()
    plan["ledger"]["schemes"].update({s: plan["ledger"]["schemes"]["zero3"] for s in ("zero1", "zero2")})
    verdicts = judge(claims, Evidence(plan, ledger=ledger_table(20 * PHI // N), claimed_machine=machine,
                                      gates=gates(optimizer_step_time="PASS", peak_memory_smallest_device="PASS",
                                                  loss_convergence="PASS", zero_nonfinite="PASS")))
    assert [v["id"] for v in verdicts["claims"]] == [claim["id"] for claim in claims["claims"]]
    by_id = {v["id"]: v for v in verdicts["claims"]}
    assert by_id["hardware"]["on_paper"]["verdict"] == DOES_NOT_HOLD  # the RTX 5070 is a 12 GB card
    assert by_id["zero3_communication"]["measured_here"]["text"].startswith("cannot be judged here (not measured")
    for v in verdicts["claims"]:
        assert v["on_paper"]["verdict"] in c.VERDICTS and v["measured_here"]["verdict"] in c.VERDICTS


def test_analysis_claims_never_imports_torch():
    import subprocess
    import sys
    code = "import sys, zerogate.analysis.claims; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_claims_file_is_an_input_of_the_judge_only():
    """Editing a claim re-judges (judge_seed_claims, then the report), never re-plans or retrains: no other rule
    reads config/claims.yaml, and the judge needs no training rule's output it would re-make."""
    from tests.unit.test_workflow import planned_jobs, snakemake

    done = snakemake("-n", "--config", "profile=smoke", "machine=dry-run")
    assert planned_jobs(done)["judge_seed_claims"] == 1 and planned_jobs(done)["plan_claimed_box"] == 1
    readers, rule = [], None
    for line in done.stdout.splitlines():
        if found := re.match(r"^(?:local)?rule (\w+):", line):
            rule = found[1]
        elif line.strip().startswith("input:") and "config/claims.yaml" in line:
            readers.append(rule)
    assert readers == ["judge_seed_claims"], readers
