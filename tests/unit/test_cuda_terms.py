"""The CUDA device terms of ZeRO-3 read in the installed DeepSpeed and torch (offloaded partitions' device
copies, torch's optimizer temporaries, the cross-stream reserve, the CUDA context by module loading, one
communicator per process group), each where it applies and nowhere else; the intervals they give a need, the
three-valued fit verdict and the "fits up to N, may fit up to M" micro-batch pair."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.unit.test_ledger import claim_counts, claim_setup
from zerogate.config.machines import check, load_description
from zerogate.contracts.run import DsConfig
from zerogate.predict.cuda_terms import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_OF_RESERVED,
    NCCL_COMMUNICATOR_BYTES,
    cross_stream_reserve,
    fragmentation_margin,
    module_loading,
    overhead_spreads,
)
from zerogate.predict.fit import (
    Need,
    checks,
    largest_micro_batches,
    memory_check,
    overall_verdict,
    verdict,
)
from zerogate.predict.fsdp2_terms import fsdp2_terms
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import names_torch_optimizer
from zerogate.predict.zero_terms import zerogate_terms

CLAIM_BOX = "config/machines/claim-rtx5070-rtx4090.yaml"


def test_offloaded_partitions_are_copied_to_the_device_only_on_cuda_with_parameter_offload():
    counts = claim_counts()
    device = zerogate_terms(counts, claim_setup()).device
    # The rank's share of the gathered set, in the parameters' dtype.
    assert device["offloaded_partition_copies"] == 2 * -(-(device["gathered_parameters"] // 2) // 2)
    assert "offloaded_partition_copies" not in zerogate_terms(counts, claim_setup(offload_param=False)).device
    on_cpu = claim_setup(device_kind="cpu", dtype="fp32")
    assert "offloaded_partition_copies" not in zerogate_terms(counts, on_cpu).device


def test_torch_optimizer_temporaries_only_on_cuda_without_optimizer_offload_and_with_torch_adam():
    counts = claim_counts()
    torch_adam = claim_setup(offload_optimizer=False, offload_param=False, torch_optimizer=True)
    terms = zerogate_terms(counts, torch_adam)
    # ZeRO-3 steps one sub-group at a time: an fp32 copy of its second moment (exp_avg_sq_sqrt).
    share = counts.partition_numel(2)
    assert terms.device["optimizer_step_temporaries"] == 4 * min(share, torch_adam.sub_group_size)
    spread = terms.device_spreads["optimizer_step_temporaries"]
    assert spread.low == 0 and spread.high == terms.device["optimizer_step_temporaries"]  # fused: none
    for other in (
        dataclasses.replace(torch_adam, torch_optimizer=False),  # DeepSpeed's FusedAdam
        dataclasses.replace(torch_adam, offload_optimizer=True),  # CPU Adam on the host
        dataclasses.replace(torch_adam, device_kind="cpu", dtype="fp32"),
    ):
        assert "optimizer_step_temporaries" not in zerogate_terms(counts, other).device


def test_a_config_without_an_optimizer_or_with_torch_adam_steps_with_torch():
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": {}}
    assert names_torch_optimizer(DsConfig.model_validate(base))
    fused = {**base, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
    assert not names_torch_optimizer(DsConfig.model_validate(fused))
    torch_adam = {**base, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}}}
    assert names_torch_optimizer(DsConfig.model_validate(torch_adam))


def test_cross_stream_reserve_is_the_side_pools_a_phase_does_not_hold_at_its_largest():
    # Peak at the forward's end (activations): the all-gather pool is held there, the reduction pool is not.
    forward_peak = {"gathered_parameters": 100, "activations": 1000, "reduce_scatter_buffer": 30}
    assert cross_stream_reserve(forward_peak) == 30
    # Peak at the boundary (the reduction): the all-gather pool is not held there.
    boundary_peak = {"gathered_parameters": 100, "reduce_scatter_buffer": 3000}
    assert cross_stream_reserve(boundary_peak) == 100
    # The tensor peak at the forward's end, which holds the gathered set; the backward past its first
    # gradient holds none of it, yet its blocks stay in the all-gather stream's pool: that phase decides.
    elsewhere = {"gathered_parameter_copies": 900, "activations": 200, "activations_at_first_gradient": 1000}
    assert cross_stream_reserve(elsewhere) == (1000 + 900) - (900 + 200)
    setup = claim_setup()
    assert "cross_stream_reserve" in overhead_spreads(forward_peak, setup, deepspeed_engine=True)
    assert "cross_stream_reserve" not in overhead_spreads(forward_peak, setup, deepspeed_engine=False)
    assert "cross_stream_reserve" not in overhead_spreads(forward_peak, claim_setup(stage=2), True)
    assert overhead_spreads(forward_peak, claim_setup(device_kind="cpu"), True) == {}
    reserve = overhead_spreads(forward_peak, setup, True)["cross_stream_reserve"]
    assert reserve.low == 0 and reserve.point == reserve.high == 30  # a failed cudaMalloc flushes the cache


@pytest.mark.parametrize(
    ("torch_build", "loading"),
    [
        ("1.13.1+cu116", "eager"),  # CUDA 11.6: no lazy loading
        ("1.12.1+cu117", "eager"),  # torch before it set CUDA_MODULE_LOADING
        ("1.13.1+cu117", "lazy"),
        ("2.5.1", "lazy"),  # CUDA not named: torch's default
        ("2.5.1+cu124", "lazy"),
        (None, "lazy"),
    ],
)
def test_a_torch_build_decides_the_contexts_module_loading(torch_build, loading):
    assert module_loading(torch_build) == loading


def test_context_by_module_loading_and_one_communicator_per_process_group():
    tensors = {"activations": 10**9}
    lazy = overhead_spreads(tensors, claim_setup(), True)
    eager = overhead_spreads(tensors, claim_setup(cuda_module_loading="eager"), True)
    assert (
        lazy["cuda_context"] == CUDA_CONTEXT_BYTES["lazy"]
        and eager["cuda_context"].low > lazy["cuda_context"].high
    )
    assert lazy["communicator"].point == 2 * NCCL_COMMUNICATOR_BYTES.point  # world + data-parallel clone
    assert overhead_spreads(tensors, claim_setup(), False)["communicator"] == NCCL_COMMUNICATOR_BYTES
    one_rank = overhead_spreads(tensors, claim_setup(ranks=1), True)["communicator"]
    assert one_rank == NCCL_COMMUNICATOR_BYTES.scaled(2)  # no collective passes over a one-rank group
    assert "communicator" in fsdp2_terms(claim_counts(), claim_setup())


def test_cpu_terms_have_no_interval_and_no_cuda_term():
    """The CPU accelerator's prediction is what it was: no CUDA term, every interval its point."""
    terms = zerogate_terms(claim_counts(), claim_setup(device_kind="cpu", dtype="fp32", torch_optimizer=True))
    assert terms.device_spreads == {}
    assert not {"offloaded_partition_copies", "optimizer_step_temporaries", "cross_stream_reserve"} & set(
        terms.device
    )
    low, high = terms.host_bounds()
    assert low == high == terms.host


def test_a_need_interval_from_the_terms_spreads():
    terms = zerogate_terms(claim_counts(), claim_setup())
    low, high = terms.device_bounds()
    levels = [device_levels(t).device for t in (low, terms.device, high)]
    assert levels[0] < levels[1] < levels[2]
    # Only the uncertain terms move.
    moved = {k for k in terms.device if low[k] != high[k]}
    assert moved == {k for k, spread in terms.device_spreads.items() if spread.low != spread.high}
    assert {"allocator_margin", "cuda_context", "communicator"} <= moved


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (5, 9, "fits"),
        (5, 10, "fits"),
        (5, 11, "may not fit"),
        (10, 11, "may not fit"),
        (11, 12, "does not fit"),
    ],
)
def test_three_valued_verdict(low, high, expected):
    assert verdict(low, high, capacity=10) == expected


def test_a_check_carries_its_interval_and_the_run_the_worst_verdict():
    fits = memory_check("device memory", 0, "gpu", Need(5, 6, 7), 10)
    may = memory_check("device memory", 1, "gpu", Need(8, 9, 11), 10)
    over = memory_check("host RAM", None, "host", Need(12, 13, 14), 10)
    assert (fits.need_low_bytes, fits.need_bytes, fits.need_high_bytes) == (5, 6, 7)
    assert may.fits and may.verdict == "may not fit"  # the point fits, the interval holds the capacity
    assert overall_verdict([fits]) == "fits" and overall_verdict([fits, may]) == "may not fit"
    assert overall_verdict([fits, may, over]) == "does not fit"
    assert memory_check("host RAM", None, "host", 7, 10).need_low_bytes == 7  # a point figure


def test_largest_micro_batch_pair_brackets_the_point_one():
    """On the claimed box without the host check deciding (a host large enough), the RTX 5070 decides: the
    micro-batch that fits for certain is at most the point one, which is at most the one that may fit; on
    cards of twice the memory some micro-batch fits for certain."""
    box = load_description(CLAIM_BOX)
    plain = box.plain()
    plain["host"]["ram_total_bytes"] = 10**13
    doubled = copy.deepcopy(plain)
    for gpu in doubled["gpus"]:
        gpu["memory_total_bytes"] *= 2
    setup = claim_setup(activation_checkpointing=True)
    for machine, least in ((check(plain, "the test's machine"), 0), (check(doubled, "doubled cards"), 1)):
        found = largest_micro_batches(claim_counts(), setup, machine)
        assert least <= found["fits"] <= found["point"] <= found["may_fit"]
        assert found["fits"] < found["may_fit"]
        at_may = checks(claim_counts(), dataclasses.replace(setup, micro_batch=found["may_fit"]), machine)
        assert all(c.verdict != "does not fit" for c in at_may)
        beyond = checks(claim_counts(), dataclasses.replace(setup, micro_batch=found["may_fit"] + 1), machine)
        assert any(c.verdict == "does not fit" for c in beyond)


def test_the_loss_shifted_logits_copy_only_for_a_stated_older_transformers():
    counts = claim_counts()
    older = zerogate_terms(counts, claim_setup(transformers_version=(4, 46, 1))).device
    # micro-batch 1 x (512 - 1) x the vocabulary, fp32 (the loss on upcast logits).
    assert older["loss_shifted_logits"] == 4 * 511 * 152064
    assert device_levels(older).tensor > device_levels(zerogate_terms(counts, claim_setup()).device).tensor
    for setup in (claim_setup(), claim_setup(transformers_version=(4, 49, 0))):
        assert "loss_shifted_logits" not in zerogate_terms(counts, setup).device
    on_cpu = claim_setup(device_kind="cpu", dtype="fp32", transformers_version=(4, 40))
    assert "loss_shifted_logits" in zerogate_terms(counts, on_cpu).device  # a tensor, on any accelerator


def test_the_allocator_margin_is_the_share_of_the_reserve_no_tensor_holds():
    """FRAGMENTATION_OF_RESERVED is a share of what the allocator reserves (GMLake's measure), not of the
    tensor peak: 15 % of the reserve idle is 15/85 of the peak above it."""
    assert fragmentation_margin(850, 0.15) == 150 and fragmentation_margin(670, 0.33) == 330
    assert fragmentation_margin(10**9, 0.0) == 0
    spread = overhead_spreads({"activations": 10**9}, claim_setup(), True)["allocator_margin"]
    peak = 10**9
    assert (spread.low, spread.point, spread.high) == tuple(
        fragmentation_margin(peak, share) for share in FRAGMENTATION_OF_RESERVED
    )
