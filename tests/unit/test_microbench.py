"""The micro-benchmarks' contract (zerogate.contracts.microbench) and the rates the time ledger takes from it
(zerogate.predict.microbench_rates)."""

from __future__ import annotations

import json

import pytest

from zerogate.contracts.base import ContractError
from zerogate.contracts.machine import Collectives
from zerogate.contracts.microbench import CopyRate, MatmulRate, Microbench, OptimizerRate, Spread
from zerogate.predict.microbench_rates import copy_key, rates_from_microbench
from zerogate.robust import quartiles


def spread(samples: list[float]) -> Spread:
    q1, median, q3 = quartiles(samples)
    return Spread(median=median, q1=q1, q3=q3, samples=samples)


def matmul(kind: str, m: int, n: int, k: int, count: int, rates: list[float]) -> MatmulRate:
    rate = spread(rates)
    flop = 2.0 * m * n * k
    return MatmulRate(
        kind=kind,
        m=m,
        n=n,
        k=k,
        timed_rows=64,
        layers=["model.layers.*.mlp.up_proj"],
        count=count,
        flop_per_call=flop,
        rate=rate,
        seconds_per_call=flop / rate.median,
    )


def bench() -> Microbench:
    return Microbench(
        accelerator="cpu",
        device="cpu",
        dtype="fp32",
        threads=1,
        micro_batch=1,
        seq_len=64,
        matmuls=[
            matmul("forward", 64, 192, 64, 2, [1e9, 2e9, 3e9]),
            matmul("forward", 64, 256, 64, 1, [4e9, 4e9, 4e9]),
            matmul("backward_input", 64, 64, 192, 2, [1e9, 1e9, 1e9]),
            matmul("backward_weight", 192, 64, 64, 2, [2e9, 2e9, 2e9]),
        ],
        copies=[
            CopyRate(route="host_to_host", pinned=None, size_bytes=1 << 20, rate=spread([5e9, 6e9, 7e9]))
        ],
        optimizer=[
            OptimizerRate(
                implementation="deepspeed_cpu_adam",
                device="cpu",
                why="DeepSpeed's CPUAdamBuilder op loaded",
                parameters=1000,
                partition_parameters=1000,
                threads=1,
                rate=spread([1e8, 2e8, 3e8]),
            )
        ],
        collectives=Collectives(backend="gloo", world=2),
        collectives_source="probe/hardware.json",
        how="test",
        seconds_s=1.0,
    )


def test_the_contract_round_trips_with_units_in_its_keys(tmp_path):
    path = bench().write(tmp_path / "microbench.json")
    data = json.loads(path.read_text())
    assert data["contract"] == "microbench/1"
    assert "matmul_rate(flop/s)" in data["matmuls"][0]
    assert "copy_rate(bytes/s)" in data["copies"][0]
    assert "update_rate(param/s)" in data["optimizer"][0]
    assert Microbench.read(path) == bench()


def test_a_renamed_key_fails_the_reader_naming_the_field(tmp_path):
    data = bench().as_json()
    data["matmuls"][0]["rate(flop/s)"] = data["matmuls"][0].pop("matmul_rate(flop/s)")
    (tmp_path / "m.json").write_text(json.dumps(data))
    with pytest.raises(ContractError, match="matmuls.0"):
        Microbench.read(tmp_path / "m.json")


def test_rates_weigh_products_by_their_time():
    rates = rates_from_microbench(bench())
    # forward: 2 x (2*64*192*64 FLOP at 2e9) + 1 x (2*64*256*64 at 4e9)
    a, b = 2.0 * 64 * 192 * 64, 2.0 * 64 * 256 * 64
    seconds = 2 * a / 2e9 + b / 4e9
    assert rates.linear_forward_s.median == pytest.approx(seconds)
    assert rates.forward_flop_per_s.median == pytest.approx((2 * a + b) / seconds)
    # the low end of a rate is the slow quartile's, the low end of a time the fast quartile's
    assert rates.forward_flop_per_s.low < rates.forward_flop_per_s.median < rates.forward_flop_per_s.high
    assert rates.linear_forward_s.low < rates.linear_forward_s.median < rates.linear_forward_s.high
    backward = 2 * (2.0 * 64 * 64 * 192) / 1e9 + 2 * (2.0 * 192 * 64 * 64) / 2e9
    assert rates.linear_backward_s.median == pytest.approx(backward)
    assert set(rates.copies) == {"host_to_host"}
    assert rates.cpu_update_param_per_s.median == 2e8 and rates.device_update_param_per_s is None
    assert "deepspeed_cpu_adam" in rates.cpu_update_param_per_s.source
    assert copy_key("host_to_device", True) == "host_to_device_pinned"


def test_rates_refuse_a_file_without_backward_products():
    without = bench().model_copy(update={"matmuls": [m for m in bench().matmuls if m.kind == "forward"]})
    with pytest.raises(ValueError, match="backward"):
        rates_from_microbench(without)
