"""The step-time ledger's copies around ZeRO's reductions and update, and the norm's float64 copy
(zerogate.predict.step_time_copies, step_time_update.norm_traffic): each against DeepSpeed's copies counted
by hand, fresh or into resident buffers, priced on the CPU accelerator at the chains' cost by size (fresh)
and the host-to-host copy's rate (resident), and at the memory's bandwidth on a GPU box."""

from dataclasses import replace

import pytest

from tests.unit.test_floor_comms import cpu_setup, tiny_counts
from tests.unit.test_ledger import claim_setup, oracle_counts
from tests.unit.test_microbench import CHAINS, OVERHEAD, bench
from tests.unit.test_step_time import CLAIM_BOX, NVLINK_BOX, qwen3_8b, zero3_setup
from zerogate.config.machines import load_description
from zerogate.predict import rates
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.step_time import step_time
from zerogate.predict.step_time_copies import (
    BOUNDARY_COPIES,
    REDUCTION_COPIES,
    boundary_copies,
    reduction_copies,
)
from zerogate.predict.step_time_memory import Traffic, memory_bound
from zerogate.predict.step_time_update import norm_bytes_per_element, norm_traffic

E = 2010  # tiny_counts: two 1000-element matrices and a 10-element norm


def test_the_reduction_copies_by_stage_counted_by_hand():
    counts = tiny_counts()
    # ZeRO-0: flatten (fresh), scale after the all-reduce and copy back (in place, into the gradients): 3 x
    # (read + write) of every fp32 gradient, once per optimizer step whatever G, the model one bucket.
    ddp = reduction_copies(counts, cpu_setup(stage=0, offload_optimizer=False, offload_param=False))
    assert ddp.per == "boundary" and ddp.moved == Traffic({E: 2 * E * 4}, {E: 2 * 2 * E * 4})
    # ZeRO-2, G = 8, no offload: every micro-step the bucket pass (into the bucket and its div_ resident, the
    # destinations' flatten fresh: 3 x 2 E b) and the owner's two copies of its partition (2 x 2 P b,
    # resident), the bucket 2010 elements at most, the owner's share half of it.
    zero2 = reduction_copies(counts, cpu_setup(stage=2, offload_optimizer=False, offload_param=False))
    assert zero2.per == "micro_step"
    assert zero2.moved == Traffic({E: 8 * 2 * E * 4}, {E: 8 * 2 * 2 * E * 4, 1005: 8 * 2 * 2 * 1005 * 4})
    # ZeRO-1 reduces once, at the boundary; with the optimizer offloaded the partition buffer's copy is the
    # offload's own.
    zero1 = reduction_copies(counts, cpu_setup(stage=1, offload_optimizer=True, offload_param=False))
    assert zero1.per == "boundary"
    assert zero1.moved == Traffic({E: 2 * E * 4}, {E: 2 * 2 * E * 4, 1005: 2 * 1005 * 4})
    # ZeRO-3: the bucket pass every micro-step (copy_ into the bucket, torch.cat fresh, div_ in place); the
    # partition copied into the fp32 buffer on the first micro-step and added there on the 7 others (read
    # two, write one), resident.
    partition = counts.partition_numel(2)
    zero3 = reduction_copies(counts, cpu_setup(reduce_bucket=1000))
    assert zero3.per == "micro_step"
    assert zero3.moved == Traffic(
        {1000: 8 * 2 * E * 4}, {1000: 8 * 2 * 2 * E * 4, 500: 2 * partition * 4 + 7 * 3 * partition * 4}
    )


def test_the_boundary_copies_by_stage_counted_by_hand():
    counts = tiny_counts()
    p2 = 1005
    # ZeRO-2 without offload: the partition flattened (2 P b, fresh) and the fp32 partition copied into the
    # 16-bit one (P x (4 + b), resident); with the offload only the latter; ZeRO-3 with the offload: the
    # offload's own copies.
    zero2 = boundary_copies(counts, cpu_setup(stage=2, offload_optimizer=False, offload_param=False))
    assert zero2.moved == Traffic({p2: 2 * p2 * 4}, {p2: p2 * 8})
    offloaded = boundary_copies(counts, cpu_setup(stage=2, offload_optimizer=True, offload_param=False))
    assert offloaded.moved == Traffic({}, {p2: p2 * 8})
    assert boundary_copies(counts, cpu_setup()).moved.total_bytes == 0
    assert boundary_copies(counts, cpu_setup(stage=0, offload_optimizer=False)).moved.total_bytes == 0
    bf16 = boundary_copies(qwen3_8b(), zero3_setup())
    p3 = qwen3_8b().partition_numel(4)
    assert bf16.moved == Traffic({p3: 2 * p3 * 4}, {p3: p3 * (4 + 2)})


def test_the_norm_reads_a_float64_copy_above_zero_0():
    # 4 B read, 8 written (fresh) and 8 read again as float64, 8 to unscale; ZeRO-0's clip_grad_norm_ stays
    # in fp32 and only reads.
    assert norm_bytes_per_element(zero3_setup()) == 28
    assert norm_bytes_per_element(zero3_setup(stage=1)) == 28
    assert norm_bytes_per_element(zero3_setup(stage=0)) == 12
    assert norm_traffic(10, 4, zero3_setup()) == Traffic({4: 10 * 12}, {4: 10 * 8})
    assert norm_traffic(10, 4, zero3_setup(stage=0)) == Traffic({}, {4: 10 * 4})


def test_on_the_cpu_accelerator_fresh_bytes_take_the_chains_cost_resident_ones_the_copy_rate():
    box = load_description(NVLINK_BOX)
    cpu = box.model_validate({**box.plain(), "gpus": [], "nvlink": False, "peer_to_peer": False})
    measured = rates_from_microbench(bench(OVERHEAD, CHAINS))
    lines = measured.operator_lines
    setup = cpu_setup(stage=2, offload_optimizer=False, offload_param=False)
    result = step_time(tiny_counts(), setup, cpu, measured)
    terms = {t.name: t for t in result.terms}
    copy = measured.copy("host_to_host", None)
    assert copy is not None

    def priced(fresh: dict[int, float], resident: float) -> tuple[float, float]:
        # A copy's payload is read and written: resident bytes over twice its rate.
        low, high = lines.traffic_s(fresh)
        return low + resident / (2 * copy.high), high + resident / (2 * copy.low)

    expected = priced({E: 8 * 2 * E * 4}, 8 * 2 * 2 * E * 4 + 8 * 2 * 2 * 1005 * 4)
    assert (terms[REDUCTION_COPIES].low_s, terms[REDUCTION_COPIES].high_s) == pytest.approx(expected)
    assert terms[REDUCTION_COPIES].kind == "serial" and not terms[REDUCTION_COPIES].overlapped
    assert "operator chains" in terms[REDUCTION_COPIES].source
    assert "host-to-host copy" in terms[REDUCTION_COPIES].source
    # The norm's float64 copy fresh on the largest gradient (12 B an element of the partition); its read and
    # the unscale (8 + 8 B) resident.
    norm = terms["gradient norm and unscale"]
    assert (norm.low_s, norm.high_s) == pytest.approx(priced({1000: 12 * 1005}, 16 * 1005))
    # Without a timed copy, every byte at the chains' cost.
    uncopied = replace(measured, copies={})
    alone = {t.name: t for t in step_time(tiny_counts(), setup, cpu, uncopied).terms}[REDUCTION_COPIES]
    assert (alone.low_s, alone.high_s) == pytest.approx(
        lines.traffic_s({E: 8 * 3 * 2 * E * 4, 1005: 8 * 4 * 1005 * 4})
    )
    assert "no host-to-host copy timed" in alone.source
    # Every term serial on a synchronised device: the ends are the sums of the terms' ends.
    assert result.low_s == pytest.approx(sum(t.low_s for t in result.terms if t.low_s is not None))


def test_on_a_gpu_box_the_copies_stream_through_the_devices_memory():
    box = load_description(NVLINK_BOX)
    counts, setup = qwen3_8b(), zero3_setup()
    terms = {t.name: t for t in step_time(counts, setup, box).terms}
    moved = reduction_copies(counts, setup).moved.total_bytes
    bandwidth = min(g.memory_bandwidth_gbps for g in box.gpus) * 1e9
    assert terms[REDUCTION_COPIES].low_s == pytest.approx(moved / (bandwidth * rates.DEVICE_MEMORY.high))
    assert terms[REDUCTION_COPIES].high_s == pytest.approx(moved / (bandwidth * rates.DEVICE_MEMORY.low))
    assert not terms[REDUCTION_COPIES].overlapped
    assert terms[BOUNDARY_COPIES].per == "boundary"


def test_with_the_optimizer_offloaded_the_norm_runs_on_the_device_and_the_unscale_on_the_host():
    box = load_description(CLAIM_BOX)
    counts, setup = oracle_counts(), claim_setup()  # 14e9 parameters, 2 ranks, both offloads
    partition = counts.partition_numel(2)
    norm = {t.name: t for t in step_time(counts, setup, box).terms}["gradient norm and unscale"]
    on_device, _ = memory_bound(partition * 20, setup, box, on_host=False)
    on_host, _ = memory_bound(partition * 8, setup, box, on_host=True)
    assert (norm.low_s, norm.high_s) == pytest.approx((on_device[0] + on_host[0], on_device[1] + on_host[1]))
    assert "the norm 20 B an element on the device" in norm.source
    assert "the unscale 8 B an element on the host" in norm.source
