"""Throughput floor, fit checks, refusal, and the profile's claims judged on paper against the plan."""

from pathlib import Path

import pytest

from tests.unit.helpers import described, settings
from tests.unit.test_ledger import QWEN14B, claim_counts, claim_setup, oracle_counts, rendered
from zerogate.analysis.on_paper import judge_memory, plan_claims
from zerogate.config.launch import PlanSettings
from zerogate.config.machines import (
    PcieLink,
    from_fingerprint,
    load_description,
    target_machine,
    to_fingerprint,
)
from zerogate.config.profile import check_profile, load_profile_chain, resolve_profile
from zerogate.contracts.plan import BaselineMeasurement, ModelComputeMeasurement, Plan
from zerogate.contracts.records import column
from zerogate.contracts.verdicts import CANNOT_JUDGE, DOES_NOT_HOLD
from zerogate.model.build import planned_model_config
from zerogate.predict.fit import device_capacity
from zerogate.predict.floor import floor, link_bytes, pcie_gbps
from zerogate.predict.host_memory import PAGE_BYTES
from zerogate.predict.levels import TRANSIENT_TERMS
from zerogate.predict.peak import peak_for_run
from zerogate.predict.phases import PERSISTENT, phase_bytes
from zerogate.predict.plan_text import refusal, summary
from zerogate.predict.planner import plan, plan_for_run, with_measured_compute
from zerogate.predict.trace import MicroStep, trace_micro_step
from zerogate.render.overlay import with_suggestion_profiles
from zerogate.report.html import section
from zerogate.units import format_bytes

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"


def _probed(tmp_path, fingerprint):
    """The probe's file for ``fingerprint`` (probe/hardware.json), as target_machine reads it."""
    return str(fingerprint.write(tmp_path / "hardware.json"))


@pytest.fixture
def claim_box():
    return load_description(CLAIM_BOX)


def test_pcie_bandwidth_per_generation_and_width():
    assert pcie_gbps(PcieLink(generation=4, width=16)) == pytest.approx(
        31.5, abs=0.1
    )  # docs/reference.md section 2
    assert pcie_gbps(PcieLink(generation=4, width=8)) == pytest.approx(15.75, abs=0.1)
    assert pcie_gbps(PcieLink(generation=None, width=16)) is None
    assert pcie_gbps(None) is None


def test_parameter_offload_streams_the_full_model_twice_per_micro_step():
    moved = link_bytes(oracle_counts(), claim_setup())
    # 2 x 28 GB gathered + half the gradients arriving in the reduce-scatter (docs/reference.md section 2).
    assert moved["h2d"] == 2 * 28e9 + 14e9
    assert moved["d2h"] == 14e9 + 4 * 7e9


def test_floor_on_the_claimed_box_by_hand(claim_box):
    result = floor(oracle_counts(), claim_setup(), claim_box)
    rtx4090 = result.ranks[1]
    assert rtx4090.device == "NVIDIA GeForce RTX 4090"
    # 6 FLOPs per parameter in products and token (the untied 152,064 x 5,120 input embedding is a lookup),
    # plus the attention scores and values, 12 x layers x hidden x seq_len, at the least share an SDPA kernel
    # computes under the causal mask (half: the floor stays a lower bound).
    per_token = 6 * (14e9 - 152064 * 5120) + 0.5 * 12 * 48 * 5120 * 512
    assert rtx4090.terms["compute(s)"] == pytest.approx(per_token * 512 / 330.3e12)
    assert rtx4090.terms["pcie_h2d(s)"] == pytest.approx(70e9 / (1.969e9 * 8))
    assert result.micro_step_floor_s == rtx4090.micro_step_floor_s  # slowest rank decides
    adam = 30 * 14e9 / 89.6e9  # CPU Adam: 16 B read + 12 B written + the 2 B fp16 param copy (not 36)
    assert result.optimizer_step_floor_s == pytest.approx(8 * result.micro_step_floor_s + adam)
    assert result.missing == []


def test_floor_says_what_it_could_not_compute(claim_box):
    first, *others = claim_box.plain()["gpus"]
    box = described(
        claim_box,
        gpus=[{**first, "name": "Some GPU zerogate.hardware does not list"}, *others],
        host={"memory_bandwidth_gbps": None},
    )
    result = floor(oracle_counts(), claim_setup(), box)
    assert any("compute" in m for m in result.missing) and any("cpu_adam" in m for m in result.missing)


def _gates(*names):
    """The cpu-tiny profile's gates of these names (the claim's step-time and small-card memory gates)."""
    gates = tuple(g for g in settings("cpu-tiny").gates if g.name in names)
    assert [g.name for g in gates] == list(names)
    return gates


GATES = ("optimizer_step_time", "peak_memory_smallest_device")


def test_claim_on_the_claimed_box_is_refused_with_rank_device_need_and_capacity(claim_box):
    result = plan(claim_counts(), claim_setup(), claim_box)
    assert result.refused and not result.fits
    host = [c for c in result.checks if c.what == "host RAM"][0]
    # Two ranks, each its runtime (2 GiB) and the 24 bytes per parameter of its share offloaded (168 GB).
    assert host.need_bytes == 2 * (2 * 2**30 + 168 * 10**9) and host.capacity_bytes == 192 * 10**9
    message = refusal(result)
    # The CUDA runtime's host share is an assumed 1-3 GiB per rank: the need's interval.
    assert (
        "host RAM needs 316.92 GiB (340.29 GB) (between 314.92 GiB (338.15 GB) and 318.92 GiB (342.44 GB)), "
        "capacity 178.81 GiB (192.00 GB)"
    ) in message
    assert host.verdict == "does not fit" and result.verdict == "does not fit"
    assert result.largest_micro_batch_fits_per_rank == result.largest_micro_batch_may_fit_per_rank == 0
    assert result.largest_micro_batch_per_rank == 0  # the host does not fit at any micro-batch
    verdicts = {c.gate: c.verdict for c in plan_claims(result, _gates(*GATES)).claims}
    assert verdicts["run_fits_machine"].verdict == DOES_NOT_HOLD
    # Not even as a micro-step (x8 lanes: 4.4 s per micro-step).
    assert verdicts["optimizer_step_time"].verdict == DOES_NOT_HOLD
    assert "even a micro-step cannot be that fast" in verdicts["optimizer_step_time"].evidence
    # zerogate's prediction is above the claim, DeepSpeed's own model-state estimate alone is not.
    memory = verdicts["peak_memory_smallest_device"]
    assert memory.verdict == DOES_NOT_HOLD and "estimate alone is above it" not in memory.evidence
    assert result.floor.optimizer_step_floor_s > 20  # docs/reference.md section 2: >= ~20 s
    text = summary(result, [(c.gate, c.verdict.text) for c in plan_claims(result, _gates(*GATES)).claims])
    for scheme in ("ddp", "zero1", "zero2", "zero3", "zero3_offload_all"):
        assert scheme in text
    assert "claims, on paper:" in text and "optimizer_step_time: does not hold" in text


def test_a_described_card_is_checked_against_the_memory_cuda_gives_it_and_a_probed_one_as_probed(claim_box):
    # The claimed box states its RTX 4090 as NVML counts it (24564 MiB); CUDA gives a process 23.61-23.68 GiB
    # of it (published out-of-memory messages), the rest being the driver's. The RTX 5070 is not in the table.
    four_ninety = next(g for g in claim_box.gpus if "4090" in g.name)
    assert four_ninety.memory_total_bytes == 24564 * 2**20
    assert device_capacity(four_ninety, claim_box) == round(23.645 * 2**30)
    five_seventy = next(g for g in claim_box.gpus if "5070" in g.name)
    assert device_capacity(five_seventy, claim_box) == five_seventy.memory_total_bytes
    # A card stated below the table's figure keeps its own (a laptop RTX 4090 has 16 GB).
    laptop = four_ninety.model_copy(
        update={"name": "NVIDIA GeForce RTX 4090 Laptop GPU", "memory_total_bytes": 16 * 2**30}
    )
    assert device_capacity(laptop, claim_box) == 16 * 2**30
    # A probed machine's figure is what CUDA reported there: the table does not apply.
    assert device_capacity(four_ninety, described(claim_box, source="probed")) == 24564 * 2**20
    checks = plan(claim_counts(), claim_setup(), claim_box).checks
    assert {c.capacity_bytes for c in checks if c.device == four_ninety.name} == {round(23.645 * 2**30)}


def test_device_refusal_names_the_rank_and_lists_changes_that_fit(claim_box):
    box = described(claim_box, host={"ram_total_bytes": 10**12})  # plenty: only the devices can fail
    result = plan(claim_counts(), claim_setup(offload_optimizer=False, offload_param=False), box)
    assert result.refused
    failing = [c for c in result.checks if not c.fits]
    assert failing[0].rank == 0 and failing[0].device == "NVIDIA GeForce RTX 5070"
    message = refusal(result)
    assert "rank 0 NVIDIA GeForce RTX 5070: device memory needs" in message
    changes = [s.change for s in result.suggestions]
    # Full offload alone leaves 12.3 GiB on the 12 GB card (the formula's 7 GiB of activations among it);
    # with activation checkpointing and micro-batch 1 it fits.
    assert "all of: full offload, micro-batch 1, activation checkpointing" in changes
    assert "ZeRO-3 with optimizer and parameter offload to CPU" not in changes
    assert "ZeRO-3 with optimizer offload to CPU" not in changes  # 26 GiB on the 12 GB card does not fit


def test_override_lets_an_infeasible_run_through_as_a_deviation(claim_box):
    result = plan(
        oracle_counts(), claim_setup(), claim_box, PlanSettings(allow_infeasible=True, reason="measure OOM")
    )
    assert not result.fits and not result.refused
    assert result.deviations[0].path == "plan.allow_infeasible"
    assert result.deviations[0].reason == "measure OOM"


def test_a_fitting_run_is_not_refused(claim_box):
    box = described(claim_box, host={"ram_total_bytes": 512 * 10**9})
    result = plan(claim_counts(), claim_setup(activation_checkpointing=True), box)
    assert result.fits and not result.refused and result.suggestions == []
    assert result.deciding_check.device == "NVIDIA GeForce RTX 5070"  # the smallest device decides


def _claim_profile(tiny_profile):
    """cpu-tiny's settings with the claim's model (Qwen2.5-14B's shape) at the claim's 512 tokens."""
    tiny = settings(tiny_profile)
    return tiny.model_copy(
        update={"model": QWEN14B, "dataset": tiny.dataset.model_copy(update={"seq_len": 512})}
    )


def test_claim_profile_planned_for_the_claimed_box(claim_box, tiny_profile):
    profile = _claim_profile(tiny_profile)
    machine, fingerprint = target_machine(str(CLAIM_BOX), None, "ignored")
    assert machine == claim_box and fingerprint == to_fingerprint(claim_box)
    ds, run_spec = rendered(profile, fingerprint)
    result = plan_for_run(run_spec, ds, machine, profile.plan, "claim")
    assert ds.raw["fp16"]["enabled"] is True and result.dtype == "fp16" and result.ranks == 2
    assert result.ledger.parameters == 14_770_033_664
    assert result.refused
    assert Plan.parse(result.as_json(), "plan.json") == result  # the file reads back as written


def test_a_profile_override_of_the_precision_is_what_the_plan_sizes(claim_box, tiny_profile):
    """The run spec's dtype is the rendered config's after the profile's overrides: turning the claim's
    fp16 off plans fp32 (every dtype-dependent size of the ledger doubles), turning bf16 on plans bf16."""
    profile = _claim_profile(tiny_profile)
    machine, fingerprint = target_machine(str(CLAIM_BOX), None, "ignored")
    # The claimed box's cards as a bf16-capable pair, so that bf16 stays bf16 when asked for.
    bf16_box = to_fingerprint(
        described(claim_box, gpus=[{**g, "bf16_supported": True} for g in claim_box.plain()["gpus"]])
    )
    fp16_off = {"path": "fp16.enabled", "value": False, "reason": "train in fp32"}
    bf16_on = {"path": "bf16.enabled", "value": True, "reason": "train in bf16"}
    plans = {}
    for name, box, overrides in (
        ("claim", fingerprint, []),
        ("fp32", fingerprint, [fp16_off]),
        ("bf16", bf16_box, [fp16_off, bf16_on]),
    ):
        ds, run_spec = rendered(profile, box, overrides)
        assert run_spec.dtype == ds.dtype == name.replace("claim", "fp16")
        plans[name] = plan_for_run(run_spec, ds, machine, profile.plan, "claim")
    assert [p.dtype for p in plans.values()] == ["fp16", "fp32", "bf16"]
    assert [p.ledger.dtype for p in plans.values()] == ["fp16", "fp32", "bf16"]
    half, full = plans["claim"].ledger.own.zerogate, plans["fp32"].ledger.own.zerogate
    assert full.host_terms_per_rank_bytes["parameters"] == 2 * half.host_terms_per_rank_bytes["parameters"]
    assert (
        full.device_terms_bytes["gathered_parameters"] == 2 * half.device_terms_bytes["gathered_parameters"]
    )
    # The formula's layers double; the logits' fp32 upcast and its gradient (8 B per logit) do not.
    assert full.activations_formula_bytes == 2 * half.activations_formula_bytes - 8 * 512 * 152064
    # The traced activations are the trace's at each precision: more in fp32, less than twice (the ops that
    # upcast to fp32 in fp16 alias their input in fp32).
    assert (
        half.device_terms_bytes["activations"]
        < full.device_terms_bytes["activations"]
        < 2 * half.device_terms_bytes["activations"]
    )
    for name in ("claim", "fp32"):
        traced = trace_micro_step(
            planned_model_config(QWEN14B, 152064, 512), MicroStep(1, 512, plans[name].dtype, "sdpa")
        )
        assert plans[name].ledger.own.zerogate.device_terms_bytes["activations"] == traced.total_bytes
    # Mixed precision keeps a 16-bit copy of the parameters beside the fp32 master; pure fp32 keeps its
    # parameters in fp32, and ZeRO-3 a second fp32 copy as the master all the same (stage3.py compares the
    # partition's torch.device with a device-name string, which never matches, so it always clones).
    no_offload = [
        {"path": "zero_optimization.offload_optimizer.device", "value": "none", "reason": "on the device"},
        {"path": "zero_optimization.offload_param.device", "value": "none", "reason": "on the device"},
    ]
    ds, run_spec = rendered(profile, fingerprint, no_offload)
    mixed = plan_for_run(run_spec, ds, machine, profile.plan, "claim")
    ds, run_spec = rendered(profile, fingerprint, [fp16_off, *no_offload])
    pure = plan_for_run(run_spec, ds, machine, profile.plan, "claim")
    share = mixed.ledger.own.zerogate.device_terms_bytes["parameters"] // 2
    assert mixed.ledger.own.zerogate.device_terms_bytes["master_parameters"] == 4 * share
    assert pure.ledger.own.zerogate.device_terms_bytes["master_parameters"] == 4 * share
    assert pure.ledger.own.zerogate.device_terms_bytes["parameters"] == 4 * share
    assert mixed.ledger.own.zerogate.device_terms_bytes["parameters"] == 2 * share
    assert plans["bf16"].ledger.own.zerogate == half  # bf16 and fp16 both take 2 bytes


def test_tiny_profile_fits_this_kind_of_machine(tiny_profile, cpu_fingerprint, tmp_path):
    machine, fingerprint = target_machine(None, _probed(tmp_path, cpu_fingerprint), "testbox")
    assert machine == from_fingerprint(cpu_fingerprint, "testbox") and fingerprint == cpu_fingerprint
    ds, run_spec = rendered(tiny_profile, fingerprint)
    result = plan_for_run(run_spec, ds, machine, settings(tiny_profile).plan, "cpu-tiny")
    assert result.fits and result.scheme == "zero3_offload_all" and result.dtype == "fp32"
    assert [c.what for c in result.checks] == ["host RAM"]


def test_the_plan_with_measured_compute_is_the_plan_planned_with_it(tiny_profile, cpu_fingerprint, tmp_path):
    machine, fingerprint = target_machine(None, _probed(tmp_path, cpu_fingerprint), "testbox")
    ds, run_spec = rendered(tiny_profile, fingerprint)
    measured = ModelComputeMeasurement(
        forward_backward_s=0.5,
        samples_s=[0.5],
        threads=1,
        micro_batch=1,
        seq_len=64,
        dtype="fp32",
        parameters=139_584,
        through_deepspeed=True,
        how="the test's",
    )
    on_paper = plan_for_run(run_spec, ds, machine, settings(tiny_profile).plan, "cpu-tiny")
    replanned = with_measured_compute(on_paper, run_spec, ds, machine, measured)
    # Only the floor moves: the test machine states no compute peak, so on paper there is no floor, and with
    # the measured pass there is one of at least 8 micro-steps x 0.5 s. It is the floor a whole plan made with
    # the measurement has: nothing else a plan holds depends on the measurement.
    assert on_paper.floor.optimizer_step_floor_s is None and replanned.floor.optimizer_step_floor_s >= 8 * 0.5
    assert replanned == plan_for_run(run_spec, ds, machine, settings(tiny_profile).plan, "cpu-tiny", measured)


def _baseline(peak_rss_bytes: int) -> BaselineMeasurement:
    """A runtime-baseline measurement (plan/runtime_baseline.json's) of this peak resident set."""
    return BaselineMeasurement(
        peak_rss_bytes=peak_rss_bytes,
        peak_rss_range_bytes=[peak_rss_bytes, peak_rss_bytes],
        runs=[],
        module="zerogate.runtime.baseline",
        backend="gloo",
        how="the test's",
    )


def test_peak_prediction_on_the_cpu_accelerator_adds_the_measured_baseline(
    tiny_profile, cpu_fingerprint, tmp_path
):

    _, fingerprint = target_machine(None, _probed(tmp_path, cpu_fingerprint), "testbox")
    ds, run_spec = rendered(tiny_profile, fingerprint)
    with_base = peak_for_run(run_spec, ds, _baseline(500 * 2**20))
    without = peak_for_run(run_spec, ds, _baseline(0))
    assert with_base.total_bytes - without.total_bytes == 500 * 2**20
    assert with_base.metric == column("peak_rss_gib") == "memory/peak_rss(GiB)"
    terms = with_base.terms_bytes
    assert (
        terms["shm_comm_buffer"] == PAGE_BYTES
    )  # one other rank's state page: training's collectives use gloo
    phi = 139_584  # cpu-tiny, counted by hand in test_ledger
    # An untouched page is not resident: the 5e8-element reduce bucket holds at most the model's gradients.
    assert terms["reduce_bucket"] == 4 * phi and ds.raw["zero_optimization"]["reduce_bucket_size"] > phi
    # The transient part is the largest phase: one of the phases' sums, and none larger.
    phases = phase_bytes(terms)
    assert with_base.transient_bytes in phases.values() and with_base.transient_bytes == max(phases.values())
    # On cpu-tiny's two-layer model the forward's end is that phase: the fetch's buffer, every parameter's
    # copy (kept for the backward: the model is far below stage3_max_reuse_distance) and every activation
    # (the default run's measured peak falls in the forward, docs/measurements.md).
    assert with_base.transient_bytes == sum(
        terms[k] for k in ("gathered_parameters", "gathered_parameter_copies", "activations")
    )
    assert set(PERSISTENT) & set(TRANSIENT_TERMS) == set()
    assert with_base.persistent_bytes + with_base.transient_bytes == with_base.total_bytes


def test_the_small_card_claim_shows_the_traced_terms_and_each_change_under_it_plans_with_one_command(
    claim_box, tmp_path
):
    """The claim re-planned for the claimed box: the small-card verdict names the traced activation terms,
    and every change that brings the small card under 7.42 GB is a written profile whose one command plans
    it (here: the profile loaded as that command loads it, planned, and under the threshold)."""

    claim = settings("claim-14b")
    machine, fingerprint = target_machine(str(CLAIM_BOX), None, "ignored")
    ds, run_spec = rendered(claim, fingerprint)
    result = with_suggestion_profiles(
        plan_for_run(run_spec, ds, machine, claim.plan, "claim-14b"),
        tmp_path,
        "claim-14b",
        claim.training.run,
        claim.deepspeed.overrides,
        str(CLAIM_BOX),
    )
    verdict = judge_memory(result, 7.42, "GB")
    assert verdict.verdict == DOES_NOT_HOLD
    acts = result.ledger.activations
    assert acts.basis == "traced" and acts.layers == 48
    assert (
        f"activations traced {format_bytes(acts.saved_bytes)} ({format_bytes(acts.per_layer_bytes)} per "
        "layer x 48 "
        f"layers + {format_bytes(acts.outside_layers_bytes)} outside the layers)" in verdict.evidence
    )
    assert "the Korthikanti formula" in verdict.evidence and "backward transient" in verdict.evidence
    # No change brings the small card under the claim's 7.42 GB: with checkpointing the end of the backward
    # decides (the embedding's gradient reduced with its device copy and fp64 norm copy).
    assert not [c for c in result.device_changes if c.smallest_device_need_bytes < 7.42e9]
    assert "under it with" not in verdict.evidence
    # Under a threshold between the changes' needs and the plan's, each change is listed with its command;
    # the threshold lies inside the plan's interval, so the claim cannot be judged.
    limit = 12.0
    assert max(c.smallest_device_need_bytes for c in result.device_changes) < limit * 1e9
    loose = judge_memory(result, limit, "GB")
    small = result.smallest_device
    assert small.need_low_bytes < limit * 1e9 < small.need_bytes
    assert (loose.verdict, loose.why) == (CANNOT_JUDGE, "the claim lies inside the predicted interval")
    for change in result.device_changes:
        assert f"{change.change} (needs {format_bytes(change.smallest_device_need_bytes)}" in loose.evidence
        assert f"plan it: {change.command}" in loose.evidence
    checkpointing = next(c for c in result.device_changes if c.change == "activation checkpointing")
    chain = load_profile_chain(REPO / "config/profiles", checkpointing.profile_file, "test", "profile")
    suggested = check_profile(resolve_profile(chain), chain, REPO)
    ds, run_spec = rendered(suggested, fingerprint)
    replanned = plan_for_run(run_spec, ds, machine, suggested.plan, "claim-14b-checkpointing")
    assert replanned.smallest_device.need_bytes == checkpointing.smallest_device_need_bytes
    assert (
        replanned.ledger.activations.saved_bytes < acts.saved_bytes / 5
    )  # checkpointing keeps layer inputs only


def test_nvme_offload_is_checked_against_the_stated_capacity_or_noted(claim_box, tmp_path):
    setup = claim_setup(nvme_optimizer=True, nvme_param=True)
    stated = described(claim_box, host={"nvme_bytes": 2 * 10**12})  # the schema takes the capacity
    result = plan(claim_counts(), setup, stated)
    nvme = [c for c in result.checks if c.what == "NVMe"]
    # Per node: two ranks x (2 + 4 + 8 bytes) x Phi / 2 of parameters, master weights and Adam's moments.
    assert len(nvme) == 1 and nvme[0].need_bytes == 14 * 14 * 10**9 and nvme[0].fits and result.notes == []
    small = described(claim_box, host={"nvme_bytes": 10**11})
    assert not [c for c in plan(claim_counts(), setup, small).checks if c.what == "NVMe"][0].fits
    unknown = plan(claim_counts(), setup, claim_box)
    assert [c.what for c in unknown.checks if c.rank is None] == ["host RAM"]
    assert unknown.notes and "states no NVMe capacity (host.nvme_bytes)" in unknown.notes[0]


def test_the_claimed_box_plan_says_what_fsdp2_would_need_there(claim_box):
    result = plan(claim_counts(), claim_setup(), claim_box)
    peers = {peer.variant: peer for peer in result.peers}
    assert list(peers) == ["fsdp2", "fsdp2-offload"]
    whole, offload = peers["fsdp2"], peers["fsdp2-offload"]

    def device(peer):
        return [c.need_bytes for c in peer.checks if c.rank is not None]

    def host(peer):
        return next(c for c in peer.checks if c.rank is None).need_bytes

    # FSDP2 shards evenly: both cards need the same; CPUOffloadPolicy takes the 16 bytes per parameter's share
    # (fp32 parameters and gradients, Adam's two states) off each device (and its allocator margin with them).
    share = claim_counts().first_dim_padded_numel(2) // 2
    assert len(set(device(whole))) == 1 and len(set(device(offload))) == 1
    assert device(whole)[0] - device(offload)[0] >= 16 * share
    # The host: each rank's runtime (2 GiB) and the model as the engine builds it, whole in fp32; offloaded,
    # the larger 16 bytes per parameter's share instead.
    assert host(whole) == 2 * (2 * 2**30 + 4 * 14 * 10**9)
    assert host(offload) == 2 * (2 * 2**30 + 16 * share)
    assert not whole.fits and not offload.fits and host(offload) > 192 * 10**9
    # The offload changes no collective; every micro-step of the 8 gathers and reduce-scatters again, the
    # norm's all-reduce (82 fp32 local norms) once per step.
    assert whole.communicated_per_step_bytes == offload.communicated_per_step_bytes
    one = plan(claim_counts(), claim_setup(accumulation=1), claim_box).peers[0].communicated_per_step_bytes
    norm = 82 * 4
    assert whole.communicated_per_step_bytes - norm == pytest.approx(8 * (one - norm))
    assert "fp16" in offload.note  # zerogate's engine trains fp32 or bf16: the sizes are the same
    assert "fsdp2-offload: DOES NOT FIT" in summary(result)
    assert Plan.parse(result.as_json(), "plan.json") == result


def test_the_reports_claimed_box_table_lists_the_peers_with_their_needs(claim_box):
    result = plan(claim_counts(), claim_setup(), claim_box)
    page = section("scheme_table", result, "The plan for the claimed box", "schemes-claimed")
    peers = page[page.index("id='schemes-claimed-peers'") :]
    host = next(c for c in result.peers[1].checks if c.rank is None)
    assert "fsdp2-offload" in peers and format_bytes(host.need_bytes) in peers
    assert format_bytes(result.peers[1].communicated_per_step_bytes) in peers
    assert "NVIDIA GeForce RTX 5070" in peers and "<td>no</td>" in peers
