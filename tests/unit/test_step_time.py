"""The step-time ledger (zerogate.predict.step_time): each term against its formula by hand, the overlap rule,
the deciding term, and the floor on an NVLink box (a true lower bound there too)."""

import dataclasses
from pathlib import Path

import pytest

from tests.unit.helpers import settings
from tests.unit.test_floor_comms import cpu_setup, tiny_counts
from tests.unit.test_ledger import claim_counts, claim_setup, oracle_counts, rendered
from tests.unit.test_microbench import CHAINS, OVERHEAD, TWO_PARAMETERS, bench
from zerogate import hardware
from zerogate.analysis.on_paper import judge_step_time, judge_step_time_predicted, plan_claims
from zerogate.config.machines import load_description, target_machine
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import Plan
from zerogate.contracts.verdicts import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS
from zerogate.predict import rates
from zerogate.predict.floor import floor
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.nccl_latency import modelled_latency
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.plan_text import summary
from zerogate.predict.planned_run import run_setup
from zerogate.predict.planner import plan, with_measured_compute
from zerogate.predict.setup import Setup
from zerogate.predict.step_time import step_time
from zerogate.predict.step_time_modules import (
    DISPATCH,
    GPU_HOST,
    engine_parameters,
    module_terms,
)
from zerogate.predict.step_time_operators import OPERATORS
from zerogate.predict.step_time_terms import HOST_WORK, host_copy_bytes, overlap_comm_on, overlaps
from zerogate.predict.step_time_text import change_step
from zerogate.predict.suggestions import device_changes
from zerogate.report.html import fmt, section

REPO = Path(__file__).resolve().parents[2]
NVLINK_BOX = REPO / "tests/data/machines/a100-sxm4-40gb-nvlink-x4.yaml"
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"
EMBEDDING = 151936 * 4096


def qwen3_8b() -> ModelCounts:
    """Qwen3-8B's shape by hand: 36 decoder layers of 4096, untied 151,936-token embedding and head."""
    layer = (8_190_735_360 - 2 * EMBEDDING) // 36
    return ModelCounts(
        total=2 * EMBEDDING + 36 * layer,
        largest_layer=EMBEDDING,
        numels=(EMBEDDING, *(layer,) * 36, EMBEDDING),
        hidden=4096,
        layers=36,
        heads=32,
        vocab=151936,
        tied_embeddings=False,
    )


def zero3_setup(**changes) -> Setup:
    base = Setup(
        ranks=4,
        nodes=1,
        dtype="bf16",
        device_kind="cuda",
        micro_batch=1,
        seq_len=512,
        accumulation=1,
        stage=3,
        offload_optimizer=False,
        offload_param=False,
        pin_memory=False,
        reduce_bucket=500_000_000,
        prefetch_bucket=50_000_000,
        persistence_threshold=100_000,
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def nvlink_box():
    return load_description(NVLINK_BOX)


def test_the_floor_on_an_nvlink_box_keeps_collectives_off_the_pcie_link(nvlink_box):
    counts, setup = qwen3_8b(), zero3_setup()
    with_nvlink = floor(counts, setup, nvlink_box)
    assert with_nvlink.ranks[0].terms["pcie_h2d(s)"] == 0.0
    assert with_nvlink.ranks[0].terms["pcie_d2h(s)"] == 0.0
    # The floor is below the ledger's lowest step on the same box (a lower bound), and the same box without
    # NVLink puts the gathers and the reduce-scatter on PCIe 4.0 x16: 2.25 x 2 B x params x 3/4 / 31.5 GB/s.
    assert with_nvlink.optimizer_step_floor_s < step_time(counts, setup, nvlink_box).low_s
    pcie_only = nvlink_box.model_copy(update={"nvlink": False})
    h2d = floor(counts, setup, pcie_only).ranks[0].terms["pcie_h2d(s)"]
    assert h2d == pytest.approx(3 * counts.total * 2 * 3 / 4 / (1.969e9 * 16))
    assert h2d == pytest.approx(1.170, abs=0.005)


def test_compute_terms_are_flop_by_kind_at_the_achievable_rates(nvlink_box):
    counts, setup = qwen3_8b(), zero3_setup()
    terms = {t.name: t for t in step_time(counts, setup, nvlink_box).terms}
    peak = hardware.peak("NVIDIA A100-SXM4-40GB", "bf16").tflops * 1e12
    # The forward's third; the untied input embedding is a lookup, the head a product.
    matmul, attention = 2 * (counts.total - EMBEDDING) * 512, 4 * 36 * 4096 * 512 * 512
    # SDPA may run a kernel that skips the causal mask's upper half (the fast end) or one that does not.
    assert terms["forward"].low_s == pytest.approx(
        matmul / (peak * rates.GPU_MATMUL.high) + attention / 2 / (peak * rates.GPU_ATTENTION.high)
    )
    assert terms["forward"].high_s == pytest.approx(
        matmul / (peak * rates.GPU_MATMUL.low) + attention / (peak * rates.GPU_ATTENTION.low)
    )
    assert terms["backward"].low_s == pytest.approx(2 * terms["forward"].low_s)
    assert "recomputation" not in terms
    checkpointed = step_time(counts, zero3_setup(activation_checkpointing=True), nvlink_box)
    assert {t.name: t for t in checkpointed.terms}["recomputation"].low_s == pytest.approx(
        terms["forward"].low_s
    )


def test_packed_samples_attending_within_themselves_bracket_the_attention_from_none(nvlink_box):
    counts = qwen3_8b()
    whole = {t.name: t for t in step_time(counts, zero3_setup(), nvlink_box).terms}
    packed = {t.name: t for t in step_time(counts, zero3_setup(packed_samples=True), nvlink_box).terms}
    peak = hardware.peak("NVIDIA A100-SXM4-40GB", "bf16").tflops * 1e12
    matmul = 2 * (counts.total - EMBEDDING) * 512
    # The fast end keeps the products alone; the slow end is the whole sequence's attention, as unpacked.
    assert packed["forward"].low_s == pytest.approx(matmul / (peak * rates.GPU_MATMUL.high))
    assert packed["forward"].high_s == pytest.approx(whole["forward"].high_s)
    assert packed["backward"].low_s == pytest.approx(2 * packed["forward"].low_s)
    assert "attend within themselves" in packed["forward"].source


def test_the_attention_is_the_share_of_its_scores_the_runs_causal_kernel_computes(nvlink_box):
    counts, seq = qwen3_8b(), 4096
    attention = 4 * 36 * 4096 * seq * seq  # the forward's whole count
    peak = hardware.peak("NVIDIA A100-SXM4-40GB", "bf16").tflops * 1e12
    matmul = 2 * (counts.total - EMBEDDING) * seq

    def forward(**changes):
        found = {t.name: t for t in step_time(counts, zero3_setup(seq_len=seq, **changes), nvlink_box).terms}
        return found["forward"].low_s, found["forward"].high_s

    products = (matmul / (peak * rates.GPU_MATMUL.high), matmul / (peak * rates.GPU_MATMUL.low))
    eager = forward(attention="eager")
    assert eager[0] - products[0] == pytest.approx(attention / (peak * rates.GPU_ATTENTION.high))
    # FlashAttention skips the tiles past the diagonal: half, and the diagonal's tiles (128 keys) whole.
    flash = forward(attention_kernel="flash_attention_2")  # a row that states it, planned with SDPA
    share = 0.5 + 128 / (2 * seq)
    assert flash[0] - products[0] == pytest.approx(attention / 2 / (peak * rates.GPU_ATTENTION.high))
    assert flash[1] - products[1] == pytest.approx(share * attention / (peak * rates.GPU_ATTENTION.low))
    # A kernel the source does not name: the two ends, as SDPA's.
    assert forward(attention_kernel="unknown") == pytest.approx((flash[0], eager[1])) == forward()
    # The floor counts the least share: below the ledger's fast end with either kernel; MFU's count is PaLM's.
    assert (
        floor(counts, zero3_setup(seq_len=seq), nvlink_box).ranks[0].terms["compute(s)"]
        < floor(counts, zero3_setup(seq_len=seq, attention="eager"), nvlink_box).ranks[0].terms["compute(s)"]
    )
    assert hardware.training_flops_per_token(0, 36, 4096, seq) == 12 * 36 * 4096 * seq
    assert hardware.causal_attention_share("flash_attention_2", 64) == (0.5, 1.0)  # one tile: all of it


def test_collectives_are_the_theory_at_the_described_route(nvlink_box):
    counts, setup = qwen3_8b(), zero3_setup()
    terms = {t.name: t for t in step_time(counts, setup, nvlink_box).terms}
    found = floor(counts, setup, nvlink_box).communication.micro_step.kinds["all_gather"]
    # Low: the volume at the NVLink figure (the floor's own term) and each call at NCCL's modelled latency's
    # low end; high: at COLLECTIVE_BANDWIDTH.low of the bandwidth and the latency's high end.
    latency = modelled_latency("all_gather", setup.ranks, nvlink=True)
    assert terms["all-gathers per micro-step"].low_s == pytest.approx(
        found.volume_bytes / 300e9 + found.calls * latency.value
    )
    assert terms["all-gathers per micro-step"].high_s == pytest.approx(
        found.volume_bytes / (300e9 * rates.COLLECTIVE_BANDWIDTH.low) + found.calls * latency.high
    )
    assert terms["all-gathers per micro-step"].overlapped


def test_offload_copies_and_cpu_adam_by_hand():
    box = load_description(CLAIM_BOX)
    counts, setup = oracle_counts(), claim_setup()  # 14e9 parameters, 2 ranks, both offloads, pinned, G = 8
    moved = host_copy_bytes(counts, setup)
    partition = counts.partition_numel(2)
    assert moved["gradients d2h"] == 8 * partition * 4 and moved["gradients h2d"] == 7 * partition * 4
    assert "updated partition h2d" not in moved  # the 16-bit partitions live on the host
    terms = {t.name: t for t in step_time(counts, setup, box).terms}
    link = 1.969e9 * 8  # the RTX 4090's PCIe 4.0 x8, the slower link
    assert terms["gradients d2h (pinned)"].low_s == pytest.approx(
        8 * partition * 4 / (link * rates.PCIE_PINNED.high)
    )
    adam = terms["CPU Adam update"]
    assert not adam.overlapped and adam.per == "boundary"
    # Both ranks' partitions over one host's memory: 30 B per parameter at HOST_MEMORY of 89.6 GB/s.
    assert adam.high_s == pytest.approx(2 * partition * 30 / (89.6e9 * rates.HOST_MEMORY.low))
    pageable = step_time(counts, dataclasses.replace(setup, pin_memory=False), box)
    slower = {t.name: t for t in pageable.terms}["gradients d2h (pageable)"]
    assert slower.high_s > terms["gradients d2h (pinned)"].high_s


def test_the_overlap_rule_follows_deepspeeds_streams(nvlink_box):
    assert overlap_comm_on(zero3_setup()) and not overlap_comm_on(zero3_setup(stage=2))
    assert not overlap_comm_on(zero3_setup(overlap_comm_given=False))
    assert overlaps(zero3_setup(), nvlink_box)
    assert not overlaps(zero3_setup(prefetch_bucket=0), nvlink_box)
    assert not overlaps(zero3_setup(device_kind="cpu"), nvlink_box)
    counts = qwen3_8b()
    overlapped = step_time(counts, zero3_setup(), nvlink_box)
    serial = step_time(counts, zero3_setup(overlap_comm_given=False), nvlink_box)
    # Serial: every term adds, so the interval's ends are the sums of the terms' ends (the host's work beside
    # the kernels has no figure on a described box, nor the kernels between the products without a trace of
    # the model: missing, left out of both).
    known = [t for t in serial.terms if t.low_s is not None]
    assert [t.name for t in serial.terms if t.low_s is None] == [GPU_HOST, OPERATORS]  # no trace given
    assert serial.low_s == pytest.approx(sum(t.low_s for t in known))
    assert serial.high_s == pytest.approx(sum(t.high_s for t in known))
    # Overlapped: shorter than serial, never shorter than the compute or the collectives alone.
    terms = {t.name: t for t in overlapped.terms}
    assert overlapped.low_s < serial.low_s
    assert overlapped.low_s >= terms["forward"].low_s + terms["backward"].low_s
    gathers = terms["all-gathers per micro-step"].low_s + terms["reduce-scatters per micro-step"].low_s
    assert overlapped.low_s >= gathers


def test_the_deciding_term_is_the_largest_contribution_and_shares_add_up(nvlink_box):
    counts = qwen3_8b()
    result = step_time(counts, zero3_setup(), nvlink_box)
    shares = [t.share for t in result.terms if t.share is not None]
    assert sum(shares) == pytest.approx(1.0)
    deciding = max(result.terms, key=lambda t: t.contribution_s or 0)
    assert result.deciding_term == deciding.name
    assert result.low_s < result.high_s
    # On the claimed box with both offloads the PCIe link decides, not the compute.
    offload = step_time(oracle_counts(), claim_setup(), load_description(CLAIM_BOX))
    assert {t.name: t.kind for t in offload.terms}[offload.deciding_term] in ("collective", "host_copy")
    compute = [t for t in offload.terms if t.kind == "compute"]
    assert all(t.contribution_s == 0 for t in compute if t.low_s is not None)


def test_a_missing_figure_is_named_not_assumed(nvlink_box):
    gpus = [{**g, "name": "Some GPU zerogate.hardware does not list"} for g in nvlink_box.plain()["gpus"]]
    box = load_description(NVLINK_BOX).model_validate({**nvlink_box.plain(), "gpus": gpus})
    result = step_time(qwen3_8b(), zero3_setup(), box)
    assert any(m.startswith("forward:") for m in result.missing)
    # The NVLink box gives no collective latency: NCCL's model of it, named in the term's source, and the
    # floor without it (the floor takes only figures the box gives).
    described = step_time(qwen3_8b(), zero3_setup(), nvlink_box)
    assert not any("latency" in m for m in described.missing)
    gathers = {t.name: t for t in described.terms}["all-gathers per micro-step"]
    assert "NCCL's latency model, a ring of 4 over NVLink" in gathers.source
    floor_gathers = floor(qwen3_8b(), zero3_setup(), nvlink_box).communication.micro_step.kinds["all_gather"]
    assert floor_gathers.latency is None
    # Across nodes NCCL adds the network's hops (tests/unit/test_networks.py): a slower call.
    one_node = modelled_latency("all_gather", 4, True)
    assert modelled_latency("all_gather", 4, True, nodes=2).high > one_node.high


def test_nccls_latency_model_is_its_tuners_ring_by_protocol():
    """zerogate.predict.nccl_latency against tuning.cc's ring formula by hand: base + steps x hop, LL the
    low end, Simple the high (LL128 enabled over NVLink only)."""
    pcie = modelled_latency("all_reduce", 8, nvlink=False)
    assert (pcie.value, pcie.high) == pytest.approx((1e-6 * (6.6 + 14 * 1.0), 1e-6 * (8.4 + 14 * 5.7)))
    nvlink = modelled_latency("all_gather", 4, nvlink=True)
    assert (nvlink.value, nvlink.high) == pytest.approx((1e-6 * (6.6 + 3 * 0.6), 1e-6 * (14.0 + 3 * 1.9)))
    assert nvlink.basis == "derived" and "tuning.cc" in nvlink.source
    # One rank: NCCL's one-rank path, nothing or one launch, bounded by the Simple protocol's base latency.
    one = modelled_latency("reduce_scatter", 1, nvlink=False)
    assert (one.value, one.high) == pytest.approx((0.0, 8.4e-6)) and "ncclLaunchOneRank" in one.source


# Published per-call times of a ring all-reduce at 8-128 B on a DGX-A100 (NVSwitch), 2 to 8 GPUs,
# NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1 (https://github.com/NVIDIA/nccl-tests/issues/123, the description),
# microseconds: a measurement the model's constants (NCCL's source) were not drawn from.
DGX_A100_RING_ALL_REDUCE_US = {2: 10.0, 3: 13.76, 4: 16.88, 5: 20.8, 6: 25.2, 7: 29.5, 8: 33.7}


def test_nccls_model_holds_the_published_ring_latencies_of_a_dgx_a100():
    for ranks, measured in DGX_A100_RING_ALL_REDUCE_US.items():
        model = modelled_latency("all_reduce", ranks, nvlink=True)
        assert model.value <= measured * 1e-6 <= model.high, ranks
    with pytest.raises(ValueError, match="all_to_all"):
        modelled_latency("all_to_all", 4, nvlink=False)


def test_a_latency_the_box_states_as_an_interval_adds_calls_times_each_end(nvlink_box):
    plain = nvlink_box.plain()
    latency = {"value": 20e-6, "high": 40e-6, "basis": "published", "source": "a box's own nccl-tests"}
    for kind in plain["collectives"]["kinds"].values():
        kind["latency_s"] = latency
    stated = load_description(NVLINK_BOX).model_validate(plain)
    counts, setup = qwen3_8b(), zero3_setup()
    # Without it, the term takes NCCL's model (test above); the stated interval replaces that.
    modelled = modelled_latency("all_gather", setup.ranks, nvlink=True)
    without = {t.name: t for t in step_time(counts, setup, nvlink_box).terms}["all-gathers per micro-step"]
    result = step_time(counts, setup, stated)
    assert not any("latency" in m for m in result.missing)
    gathers = {t.name: t for t in result.terms}["all-gathers per micro-step"]
    calls = floor(counts, setup, stated).communication.micro_step.kinds["all_gather"].calls
    assert calls > 1
    assert gathers.low_s == pytest.approx(without.low_s + calls * (20e-6 - modelled.value))
    assert gathers.high_s == pytest.approx(without.high_s + calls * (40e-6 - modelled.high))
    # The floor takes the low end: still a lower bound.
    assert floor(counts, setup, stated).optimizer_step_floor_s < result.low_s


def test_a_measured_bandwidths_slowest_repeat_sets_the_high_end_where_it_is_slower(nvlink_box):
    counts, setup = qwen3_8b(), zero3_setup()
    fraction = rates.COLLECTIVE_BANDWIDTH.low

    def gathers_with(low: float | None):
        plain = nvlink_box.plain()
        for kind in plain["collectives"]["kinds"].values():
            if kind.get("bandwidth_gbps") and low is not None:
                kind["bandwidth_gbps"]["low"] = kind["bandwidth_gbps"]["value"] * low
        described = load_description(NVLINK_BOX).model_validate(plain)
        return {t.name: t for t in step_time(counts, setup, described).terms}["all-gathers per micro-step"]

    plain_term = gathers_with(None)
    # A slowest repeat at 0.4 of the best is slower than the assumed fraction (0.6): it sets the high end;
    # one at 0.9 is not, and the fraction stays. The low end never moves.
    slow, near = gathers_with(0.4), gathers_with(0.9)
    assert slow.low_s == near.low_s == plain_term.low_s
    assert near.high_s == pytest.approx(plain_term.high_s)
    part = floor(counts, setup, nvlink_box).communication.micro_step.kinds["all_gather"]
    transfer = part.transfer_time_s * setup.accumulation
    assert transfer > 0
    assert slow.high_s - plain_term.high_s == pytest.approx(transfer * (1 / 0.4 - 1 / fraction))
    assert "slowest repeat" in slow.source


def gpu_lines(stage: int = 3):
    """The stacks' lines as micro-benchmarks on a GPU would give them (the CPU fixtures' figures)."""
    rows = [
        r.model_copy(update={"stage": stage}) if r.engine == "deepspeed" else r
        for r in OVERHEAD + TWO_PARAMETERS
    ]
    return rates_from_microbench(bench(rows))


def test_on_a_gpu_the_hosts_work_runs_beside_the_kernels_from_the_longer_of_the_two_to_both(nvlink_box):
    setup = zero3_setup()
    measured = gpu_lines()
    for modules in (400, 2_000_000):  # the device's micro-step decides the low end, then the host's work
        counts = qwen3_8b().model_copy(update={"modules": modules, "modules_in_blocks": 0})
        # Without a module count: no figure for the host's work, named missing (the device's terms alone).
        without = step_time(counts.model_copy(update={"modules": 0}), setup, nvlink_box, measured)
        assert any(m.startswith(GPU_HOST) for m in without.missing)
        host = module_terms(counts, setup, nvlink_box, measured)
        assert [t.name for t in host] == [GPU_HOST] and host[0].kind == HOST_WORK
        work_low, work_high = host[0].seconds
        assert 0 < work_low < work_high
        result = step_time(counts, setup, nvlink_box, measured)
        assert not any(m.startswith(GPU_HOST) for m in result.missing)
        # At the low end the longer of the device's micro-step and the host's work; at the high end both.
        boundary = [t for t in without.terms if t.per == "boundary" and t.low_s is not None]
        device_low = without.low_s - sum(t.low_s for t in boundary)
        assert result.low_s == pytest.approx(without.low_s + max(0.0, work_low - device_low))
        assert result.high_s == pytest.approx(without.high_s + work_high)
    assert work_low > device_low  # the second count: the host decides
    # Below ZeRO-3 without the measurement: no term, as before.
    bare = dataclasses.replace(measured, module_lines=None)
    assert GPU_HOST not in {t.name for t in step_time(counts, zero3_setup(stage=2), nvlink_box, bare).terms}


def test_the_plan_records_the_interval_and_prints_and_renders_where_the_time_goes():
    box = load_description(CLAIM_BOX)
    result = plan(claim_counts(), claim_setup(), box)
    step = result.step_time
    assert step is not None and step.low_s < step.high_s and step.deciding_term
    # In plan.json beside the floor, by the contract's aliases.
    written = Plan.model_validate_json(result.model_dump_json(by_alias=True))
    assert written.step_time == step
    assert '"low(s)"' in result.model_dump_json(by_alias=True)
    text = summary(result)
    assert "where the time goes" in text and f"decided by {step.deciding_term}" in text
    page = section("time_goes", result, result)
    interval = page[page.index("id='time-claimed-interval'") :]
    assert fmt(step.low_s) in interval and step.deciding_term in interval
    for term in step.terms:
        assert term.name in page


def test_this_machines_micro_benchmarks_replace_the_peaks_where_they_have_a_figure():
    box = load_description(CLAIM_BOX)
    cpu = box.model_validate({**box.plain(), "gpus": [], "nvlink": False, "peer_to_peer": False})
    counts, setup = tiny_counts(), cpu_setup()
    measured = rates_from_microbench(bench())
    result = step_time(counts, setup, cpu, measured)
    terms = {t.name: t for t in result.terms}
    attention = 12 * counts.layers * counts.hidden * setup.seq_len * setup.seq_len / 3  # the forward's third
    fwd, rate = measured.linear_forward_s, measured.forward_flop_per_s
    g = setup.accumulation
    # SDPA's share of the attention: from half (a kernel that skips the causal mask's upper half) to all.
    assert terms["forward"].low_s == pytest.approx(g * (fwd.low + attention / 2 / rate.high))
    assert terms["forward"].high_s == pytest.approx(g * (fwd.high + attention / rate.low))
    update = measured.cpu_update_param_per_s
    partition = counts.partition_numel(2)
    assert terms["CPU Adam update"].low_s == pytest.approx(partition / update.high)
    assert terms["CPU Adam update"].high_s == pytest.approx(2 * partition / update.low)
    assert "measured" in terms["forward"].source and "measured" in terms["CPU Adam update"].source
    # The CPU accelerator's offload copies one host buffer into another: the host-to-host copy as measured.
    copy = measured.copy("device_to_host", True)
    moved = setup.accumulation * partition * 4
    assert terms["gradients d2h (pinned)"].low_s == pytest.approx(moved / copy.high)
    # Synchronised device: everything serial, and the host's operator dispatch named as missing.
    assert not any(t.overlapped for t in result.terms)
    assert terms[DISPATCH].low_s is None
    assert any(m.startswith(DISPATCH) for m in result.missing)


def test_the_hosts_per_module_work_comes_from_the_stacks_and_the_models_module_count():
    box = load_description(CLAIM_BOX)
    cpu = box.model_validate({**box.plain(), "gpus": [], "nvlink": False, "peer_to_peer": False})
    counts = tiny_counts().model_copy(update={"modules": 33, "modules_in_blocks": 24})
    measured = rates_from_microbench(bench(OVERHEAD + TWO_PARAMETERS))
    lines = measured.module_lines
    g = cpu_setup().accumulation
    # Its three parameters: the two 1000-element matrices fetched, the 10-element norm persistent (at or
    # below 640) and only through the gradient hook: 2 at the fast end, 3 at the slow one.
    assert engine_parameters(counts, cpu_setup()) == (2, 3)
    assert engine_parameters(counts, cpu_setup(stage=2, offload_param=False)) == (3, 3)
    # The decoder layer a ZeRO-3 leaf module: 9 modules hooked, the 24 inside it eagerly.
    leaf = {t.name: t for t in step_time(counts, cpu_setup(leaf_blocks=True), cpu, measured).terms}
    assert (leaf[DISPATCH].low_s, leaf[DISPATCH].high_s) == pytest.approx(
        tuple(g * x for x in lines.seconds(9, 33, (2, 3)))
    )
    assert "9 of the model's 33 modules" in leaf[DISPATCH].source
    assert "2 fetched to 3 in all" in leaf[DISPATCH].source
    hooked = {t.name: t for t in step_time(counts, cpu_setup(), cpu, measured).terms}
    assert hooked[DISPATCH].low_s == pytest.approx(g * lines.seconds(33, 33, (2, 3))[0])
    assert hooked[DISPATCH].low_s > leaf[DISPATCH].low_s
    # What a module runs beyond its one product is a term of its own: without the trace's count of the
    # operators it has no figure, and the interval says it is a lower bound.
    result = step_time(counts, cpu_setup(), cpu, measured)
    assert any(m.startswith(OPERATORS) and "no trace" in m for m in result.missing)
    assert not any(m.startswith(DISPATCH) for m in result.missing)
    # Stacks timed at another ZeRO stage, or a model without its module count: no figure.
    other = {
        t.name: t for t in step_time(counts, cpu_setup(stage=2, offload_param=False), cpu, measured).terms
    }
    assert other[DISPATCH].low_s is None
    uncounted = {t.name: t for t in step_time(tiny_counts(), cpu_setup(), cpu, measured).terms}
    assert uncounted[DISPATCH].low_s is None


def test_the_functional_operators_are_the_traced_ops_at_the_chains_costs_by_hand(nvlink_box):
    box = load_description(CLAIM_BOX)
    cpu = box.model_validate({**box.plain(), "gpus": [], "nvlink": False, "peer_to_peer": False})
    measured = rates_from_microbench(bench(OVERHEAD, CHAINS))
    lines = measured.operator_lines
    tally = OperatorTally(computing=200, views=100, traffic_by_numel={4096: 5e6})
    setup = cpu_setup()
    g = setup.accumulation
    result = step_time(tiny_counts(), setup, cpu, measured, tally)
    term = {t.name: t for t in result.terms}[OPERATORS]
    # Low: the computing ops at the fastest dispatch, their bytes at the fastest per byte, the views free;
    # high: every op at the slowest dispatch, the bytes at the slowest per byte.
    fast, slow = lines.per_byte_s[1_000_016]  # the only size timed: every byte costs it
    assert term.low_s == pytest.approx(g * (200 * lines.dispatch_s[0] + 5e6 * fast))
    assert term.high_s == pytest.approx(g * (300 * lines.dispatch_s[1] + 5e6 * slow))
    assert term.kind == "serial" and not term.overlapped
    assert not any(m.startswith(OPERATORS) for m in result.missing)
    # It adds to the step as every other serial term does on the CPU accelerator.
    without = step_time(tiny_counts(), setup, cpu, measured)
    assert result.low_s == pytest.approx(without.low_s + term.low_s)
    # No chains timed: named, not assumed.
    unmeasured = step_time(tiny_counts(), setup, cpu, rates_from_microbench(bench(OVERHEAD)), tally)
    assert any(m.startswith(OPERATORS) and "operator_chains" in m for m in unmeasured.missing)


def test_on_a_gpu_the_functional_operators_are_their_bytes_through_the_devices_memory(nvlink_box):
    tally = OperatorTally(computing=200, views=100, traffic_by_numel={4096: 5e6, 1 << 20: 3e9})
    setup = claim_setup()
    g = setup.accumulation
    result = step_time(tiny_counts(), setup, nvlink_box, None, tally)
    term = {t.name: t for t in result.terms}[OPERATORS]
    bandwidth = min(gpu.memory_bandwidth_gbps for gpu in nvlink_box.gpus) * 1e9
    # Every size's bytes, x G, at the device memory's achievable fraction; the host's dispatch is not counted
    # (it runs beside the kernels); the kernels are on the compute stream beside the products.
    assert term.low_s == pytest.approx(g * (5e6 + 3e9) / (bandwidth * rates.DEVICE_MEMORY.high))
    assert term.high_s == pytest.approx(g * (5e6 + 3e9) / (bandwidth * rates.DEVICE_MEMORY.low))
    assert term.kind == "compute" and not term.overlapped
    without = step_time(tiny_counts(), setup, nvlink_box, None, OperatorTally())
    assert result.high_s > without.high_s
    # Without a trace of the model: named, not assumed (the interval is then too low).
    untraced = step_time(tiny_counts(), setup, nvlink_box)
    assert any(m.startswith(OPERATORS) and "no trace" in m for m in untraced.missing)


def test_a_step_time_claim_is_judged_against_the_floor_and_the_prediction():
    box = load_description(CLAIM_BOX)
    result = plan(claim_counts(), claim_setup(), box)
    low, high = result.step_time.low_s, result.step_time.high_s
    assert judge_step_time_predicted(result, low / 2).verdict == DOES_NOT_HOLD
    # These counts record no modules, so ZeRO-3's per-module host work has no figure on the described box
    # (step_time_modules): a claim above the interval cannot be confirmed; with every term's figure it would
    # hold.
    assert any(m.startswith(GPU_HOST) for m in result.step_time.missing)
    above = judge_step_time_predicted(result, 2 * high)
    assert above.verdict == CANNOT_JUDGE and "terms without a figure" in above.why
    complete = result.model_copy(update={"step_time": result.step_time.model_copy(update={"missing": []})})
    assert judge_step_time_predicted(complete, 2 * high).verdict == HOLDS
    inside = judge_step_time_predicted(result, (low + high) / 2)
    assert inside.verdict == CANNOT_JUDGE and "inside the predicted interval" in inside.why
    # The floor's verdict names the prediction beside it; plan_claims lists both.
    assert f"predicted optimizer step {low:.3g} to {high:.3g} s" in judge_step_time(result, 1.82).evidence
    gate = next(g for g in settings("cpu-tiny").gates if g.name == "optimizer_step_time")
    names = [c.gate for c in plan_claims(result, (gate,)).claims]
    assert names == ["run_fits_machine", "optimizer_step_time", "optimizer_step_time (predicted)"]


def test_across_nodes_or_on_nvme_a_term_without_a_figure_is_named(nvlink_box):
    box = load_description(CLAIM_BOX)
    two_nodes = step_time(oracle_counts(), claim_setup(nodes=2, ranks=4), box.model_copy(update={"nodes": 2}))
    assert any("across nodes" in m for m in two_nodes.missing)
    nvme = step_time(oracle_counts(), claim_setup(nvme_optimizer=True), box)
    assert any(m.startswith("NVMe swaps") for m in nvme.missing)


def test_an_overlapped_micro_step_is_the_longest_resource_plus_what_stays_exposed(nvlink_box):
    counts, setup = qwen3_8b(), zero3_setup(accumulation=2)
    result = step_time(counts, setup, nvlink_box)
    terms = {t.name: t for t in result.terms}
    kinds = floor(counts, setup, nvlink_box).communication.micro_step.kinds
    gathers, reductions = terms["all-gathers per micro-step"], terms["reduce-scatters per micro-step"]
    # One prefetch bucket of the gathers and one reduce bucket of the reductions stay on the critical path.
    exposed = gathers.low_s * min(1, setup.prefetch_bucket / (kinds["all_gather"].volume_bytes / 2))
    exposed += reductions.low_s * min(1, setup.reduce_bucket / (kinds["reduce_scatter"].volume_bytes / 2))
    compute = terms["forward"].low_s + terms["backward"].low_s
    link = gathers.low_s + reductions.low_s  # both on NVLink: they add
    boundary = sum(t.low_s for t in result.terms if t.per == "boundary")
    # The micro-step's serial work beside the compute (the copies around the reductions) adds.
    serial = sum(
        t.low_s
        for t in result.terms
        if t.per == "micro_step" and not t.overlapped and t.kind == "serial" and t.low_s is not None
    )
    assert serial > 0
    assert result.low_s == pytest.approx(max(compute, link) + exposed + serial + boundary)
    assert result.micro_step_low_s == pytest.approx((max(compute, link) + exposed + serial) / 2)


def test_the_replanned_plan_predicts_the_step_with_the_micro_benchmarks(
    tiny_profile, cpu_fingerprint, tmp_path
):
    probed = cpu_fingerprint.write(tmp_path / "hardware.json")
    machine, fingerprint = target_machine(None, str(probed), "testbox")
    ds, run_spec = rendered(tiny_profile, fingerprint)
    counts, setup, activations = run_setup(run_spec, ds, machine.nodes)
    on_paper = plan(counts, setup, machine)  # the activations by formula: only the step time is compared
    measured = rates_from_microbench(bench(OVERHEAD, CHAINS))
    replanned = with_measured_compute(on_paper, run_spec, ds, machine, None, measured)
    # The run's operators from the trace of its model, the same trace the plan's activations come from.
    operators = activations(setup).operators
    assert operators is not None and operators.computing > 0
    assert replanned.step_time == step_time(counts, setup, machine, measured, operators)
    assert OPERATORS in {t.name for t in replanned.step_time.terms if t.low_s is not None}
    assert replanned.step_time != on_paper.step_time
    # Without the micro-benchmarks the plan's prediction stays the one on paper.
    assert with_measured_compute(on_paper, run_spec, ds, machine, None).step_time == on_paper.step_time


def test_each_suggested_change_carries_the_step_it_leaves():
    """Item 5 of the time ledger: every change the plan offers has the ledger's optimizer step for the
    changed setup beside its memory, printed with it; a change whose ledger lacks a figure says "at least"."""
    counts, box, setup = claim_counts(), load_description(CLAIM_BOX), claim_setup()
    changes = {c.change: c for c in device_changes(counts, setup, box)}
    checkpointed = changes["activation checkpointing"]
    expected = step_time(counts, dataclasses.replace(setup, activation_checkpointing=True), box)
    assert (checkpointed.step_time_low_s, checkpointed.step_time_high_s) == (expected.low_s, expected.high_s)
    assert checkpointed.step_time_missing == expected.missing
    # Recomputing the forward costs time, hidden here behind the gathers on the PCIe link: never shorter.
    assert "recomputation" in {t.name for t in expected.terms}
    assert checkpointed.step_time_low_s >= step_time(counts, setup, box).low_s
    planned = plan(counts, setup, box)
    text = "\n".join(summary(planned).splitlines())
    assert f"{change_step(checkpointed)}" in text and change_step(checkpointed).startswith("step ")
    for change in [*planned.suggestions, *planned.host_changes, *planned.device_changes]:
        assert change.step_time_low_s is not None and change.step_time_low_s <= change.step_time_high_s
    # More nodes: the collectives cross the network, which the box does not describe: a lower bound.
    across = next(s for s in planned.suggestions if "nodes like this one" in s.change)
    assert across.step_time_missing and change_step(across).startswith("step at least")
