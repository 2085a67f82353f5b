"""Throughput floor, fit checks, refusal and the claim's on-paper verdict."""

import copy
import dataclasses
import time
from pathlib import Path

import pytest

from tests.unit.test_ledger import QWEN14B, claim_setup, oracle_counts
from zerogate.plan.floor import floor, link_bytes, pcie_gbps
from zerogate.config.machines import from_fingerprint, load_description, to_fingerprint
from zerogate.plan.ds_config import render
from zerogate.plan.planner import judge_claims, plan, plan_for_profile, refusal, summary, target_machine

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"


@pytest.fixture
def claim_box():
    return load_description(CLAIM_BOX)


def test_pcie_bandwidth_per_generation_and_width():
    assert pcie_gbps({"generation": 4, "width": 16}) == pytest.approx(31.5, abs=0.1)  # docs/reference.md section 2
    assert pcie_gbps({"generation": 4, "width": 8}) == pytest.approx(15.75, abs=0.1)
    assert pcie_gbps({"generation": None, "width": 16}) is None


def test_parameter_offload_streams_the_full_model_twice_per_micro_step():
    moved = link_bytes(oracle_counts(), claim_setup())
    # 2 x 28 GB gathered + half the gradients arriving in the reduce-scatter (docs/reference.md section 2).
    assert moved["h2d"] == 2 * 28e9 + 14e9
    assert moved["d2h"] == 14e9 + 4 * 7e9


def test_floor_on_the_claimed_box_by_hand(claim_box):
    result = floor(oracle_counts(), claim_setup(), claim_box)
    rtx4090 = result["ranks"][1]
    assert rtx4090["device"] == "NVIDIA GeForce RTX 4090"
    assert rtx4090["terms"]["compute(s)"] == pytest.approx(6 * 14e9 * 512 / 330.3e12)
    assert rtx4090["terms"]["pcie_h2d(s)"] == pytest.approx(70e9 / (1.969e9 * 8))
    assert result["micro_step_floor(s)"] == rtx4090["micro_step_floor(s)"]  # slowest rank decides
    adam = 30 * 14e9 / 89.6e9  # CPU Adam: 16 B read + 12 B written + the 2 B fp16 param copy (was 36: the bug)
    assert result["optimizer_step_floor(s)"] == pytest.approx(8 * result["micro_step_floor(s)"] + adam)
    assert result["missing"] == []


def test_floor_says_what_it_could_not_compute(claim_box):
    box = copy.deepcopy(claim_box)
    box["gpus"][0]["name"] = "Some GPU zerogate.hardware does not list"
    box["host"]["memory_bandwidth_gbps"] = None
    result = floor(oracle_counts(), claim_setup(), box)
    assert any("compute" in m for m in result["missing"]) and any("cpu_adam" in m for m in result["missing"])


GATES = [
    {"name": "optimizer_step_time", "claim": "1.82 s", "metric": "step_time(s)", "statistic": "median",
     "comparison": "<=", "threshold": 1.82, "unit": "s", "definition": "d"},
    {"name": "peak_memory_smallest_device", "claim": "< 7.42 GB", "metric": "memory/device_peak(GiB)",
     "statistic": "max", "comparison": "<", "threshold": 7.42, "unit": "GB", "definition": "d"},
]


def test_claim_on_the_claimed_box_is_refused_with_rank_device_need_and_capacity(claim_box):
    result = plan(oracle_counts(), claim_setup(), claim_box)
    assert result["refused"] and not result["fits"]
    host = [c for c in result["checks"] if c["what"] == "host RAM"][0]
    assert host["need(bytes)"] == 280 * 10**9 and host["capacity(bytes)"] == 192 * 10**9
    message = refusal(result)
    assert "host RAM needs 260.77 GiB (280.00 GB), capacity 178.81 GiB (192.00 GB)" in message
    verdicts = {c["gate"]: c for c in judge_claims(result, GATES)}
    assert verdicts["run_fits_machine"]["verdict"] == "impossible"
    assert verdicts["optimizer_step_time"]["verdict"] == "impossible"
    assert verdicts["optimizer_step_time"]["as_micro_step"] == "impossible"  # x8 lanes: 4.4 s per micro-step
    assert verdicts["peak_memory_smallest_device"]["verdict"] == "not expected"
    assert result["optimizer_step_floor(s)"] > 20  # docs/reference.md section 2: >= ~20 s
    text = summary(result, judge_claims(result, GATES))
    for scheme in ("ddp", "zero1", "zero2", "zero3", "zero3_offload_all"):
        assert scheme in text


def test_device_refusal_names_the_rank_and_lists_changes_that_fit(claim_box):
    box = copy.deepcopy(claim_box)
    box["host"]["ram_total_bytes"] = 10**12  # plenty: only the devices can fail
    result = plan(oracle_counts(), claim_setup(offload_optimizer=False, offload_param=False), box)
    assert result["refused"]
    failing = [c for c in result["checks"] if not c["fits"]]
    assert failing[0]["rank"] == 0 and failing[0]["device"] == "NVIDIA GeForce RTX 5070"
    message = refusal(result)
    assert "rank 0 NVIDIA GeForce RTX 5070: device memory needs" in message
    changes = [s["change"] for s in result["suggestions"]]
    assert "ZeRO-3 with optimizer and parameter offload to CPU" in changes
    assert "ZeRO-3 with optimizer offload to CPU" not in changes  # 24 GiB on the 12 GB card does not fit


def test_override_lets_an_infeasible_run_through_as_a_deviation(claim_box):
    result = plan(oracle_counts(), claim_setup(), claim_box, {"allow_infeasible": True, "reason": "measure OOM"})
    assert not result["fits"] and not result["refused"]
    assert result["deviations"][0]["path"] == "plan.allow_infeasible"
    assert result["deviations"][0]["reason"] == "measure OOM"


def test_a_fitting_run_is_not_refused(claim_box):
    box = copy.deepcopy(claim_box)
    box["host"]["ram_total_bytes"] = 512 * 10**9
    result = plan(oracle_counts(), claim_setup(activation_checkpointing=True), box)
    assert result["fits"] and not result["refused"] and result["suggestions"] == []
    assert result["deciding_check"]["device"] == "NVIDIA GeForce RTX 5070"  # the smallest device decides


def test_claim_profile_planned_for_the_claimed_box_in_seconds(claim_box, claim_config, tiny_profile):
    profile = copy.deepcopy(tiny_profile)
    profile["model"] = QWEN14B
    profile["dataset"]["seq_len"] = 512
    started = time.monotonic()
    machine, fingerprint = target_machine(str(CLAIM_BOX), None, "ignored")
    assert machine == claim_box and fingerprint == to_fingerprint(claim_box)
    ds, _, run_spec = render(claim_config, profile, fingerprint, "claim.json")
    result = plan_for_profile(profile, ds, run_spec, machine)
    assert time.monotonic() - started < 30
    assert ds["fp16"]["enabled"] is True and result["dtype"] == "fp16" and result["ranks"] == 2
    assert result["ledger"]["parameters"] == 14_770_033_664
    assert result["refused"]


def test_tiny_profile_fits_this_kind_of_machine(tiny_profile, claim_config, cpu_fingerprint):
    machine, fingerprint = target_machine(None, cpu_fingerprint, "testbox")
    assert machine == from_fingerprint(cpu_fingerprint, "testbox") and fingerprint is cpu_fingerprint
    ds, _, run_spec = render(claim_config, tiny_profile, fingerprint, "claim.json")
    result = plan_for_profile(tiny_profile, ds, run_spec, machine)
    assert result["fits"] and result["scheme"] == "zero3_offload_all" and result["dtype"] == "fp32"
    assert [c["what"] for c in result["checks"]] == ["host RAM"]


def test_peak_prediction_on_the_cpu_accelerator_adds_the_measured_baseline(tiny_profile, claim_config, cpu_fingerprint):
    from zerogate.plan.ledger import PAGE_BYTES, TRANSIENT_TERMS
    from zerogate.plan.planner import peak_for_profile

    _, fingerprint = target_machine(None, cpu_fingerprint, "testbox")
    ds, _, run_spec = render(claim_config, tiny_profile, fingerprint, "claim.json")
    baseline = {"peak_rss(bytes)": 500 * 2**20}
    with_base = peak_for_profile(tiny_profile, ds, run_spec, baseline)
    without = peak_for_profile(tiny_profile, ds, run_spec, {"peak_rss(bytes)": 0})
    assert with_base["total(bytes)"] - without["total(bytes)"] == 500 * 2**20
    assert with_base["metric"] == "memory/peak_rss(GiB)"
    terms = with_base["terms(bytes)"]
    assert terms["shm_comm_buffer"] == PAGE_BYTES  # one other rank's state page: training's collectives use gloo
    phi = 139_584  # cpu-tiny, counted by hand in test_ledger
    # An untouched page is not resident: the 5e8-element reduce bucket holds at most the model's gradients.
    assert terms["reduce_bucket"] == 4 * phi and ds["zero_optimization"]["reduce_bucket_size"] > phi
    assert with_base["transient(bytes)"] == sum(v for k, v in terms.items() if k in TRANSIENT_TERMS)
    assert with_base["persistent(bytes)"] + with_base["transient(bytes)"] == with_base["total(bytes)"]
