"""The micro-benchmarks' contract (zerogate.contracts.microbench) and the rates the time ledger takes from it
(zerogate.predict.microbench_rates)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.unit.helpers import REPO
from zerogate.config.model_data import ModelSettings
from zerogate.contracts.base import ContractError
from zerogate.contracts.machine import Collectives
from zerogate.contracts.microbench import (
    OPS_PER_LINK,
    CopyRate,
    MatmulRate,
    Microbench,
    ModuleOverhead,
    OperatorChain,
    OptimizerRate,
    Spread,
)
from zerogate.contracts.run import DsConfig
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.model.hf_config import load_config
from zerogate.model.linear_shapes import LinearShape, linear_shapes
from zerogate.predict import microbench as predict_microbench
from zerogate.predict.microbench import (
    CPU_PRODUCT_FLOP_CAP,
    KINDS,
    LOGITS_CHAINS,
    MODULE_STACKS,
    NO_BOUNDARY,
    OPERATOR_CHAINS,
    cpu_adam_built,
    matmul_rows,
    operator_chain_rows,
    optimizer_rows,
    runs_zero3_linear,
    stack_config,
    stack_shapes,
    timed_shape,
)
from zerogate.predict.microbench_rates import copy_key, rates_from_microbench
from zerogate.robust import quartiles
from zerogate.runtime import microbench as runtime_microbench
from zerogate.runtime.microbench import (
    MIN_REPEATS,
    copy_call,
    operand_pool,
    product_call,
    product_dims,
    rate_samples,
    spread_of,
    update_call,
)
from zerogate.runtime.module_overhead import StackShape, linear_function, stack, time_eager
from zerogate.runtime.operator_dispatch import chain_step
from zerogate.runtime.ops import EXTENSIONS_DIR_VARIABLE

# A Llama with grouped-query attention (k and v narrower than q), so its shapes are not all square.
TINY = ModelSettings(
    hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=24
)


def spread(samples: list[float]) -> Spread:
    q1, median, q3 = quartiles(samples)
    return Spread(median=median, q1=q1, q3=q3, samples=samples)


def matmul(kind: str, m: int, n: int, k: int, count: int, rates: list[float]) -> MatmulRate:
    rate = spread(rates)
    flop = 2.0 * m * n * k
    # The layer's rows and widths as matmul_rows writes them, read back from the product's (m, n, k)
    # (zerogate.runtime.microbench.product_dims), timed whole.
    tokens, in_features, out_features = {
        "forward": (m, k, n),
        "backward_input": (m, n, k),
        "backward_weight": (k, n, m),
    }[kind]
    assert product_dims(kind, tokens, in_features, out_features) == (m, n, k)
    return MatmulRate(
        kind=kind,
        m=m,
        n=n,
        k=k,
        timed_rows=tokens,
        timed_in_features=in_features,
        timed_out_features=out_features,
        layers=["model.layers.*.mlp.up_proj"],
        count=count,
        flop_per_call=flop,
        rate=rate,
        seconds_per_call=flop / rate.median,
    )


def overhead(
    engine: str, modules: int, seconds: list[float], stage: int = 3, parameters_per_module: int = 1
) -> ModuleOverhead:
    return ModuleOverhead(
        engine=engine,
        stage=stage,
        modules=modules,
        width=8,
        rows=64,
        time=spread(seconds),
        parameters_per_module=parameters_per_module,
    )


# Through the engine: 4 modules 2-4 ms, 24 modules 12-16 ms; eagerly 0.4-0.6 and 2.4-3.6 ms (fastest to
# slowest repeat).
OVERHEAD = [
    overhead("deepspeed", 4, [2e-3, 3e-3, 4e-3]),
    overhead("eager", 4, [0.4e-3, 0.5e-3, 0.6e-3]),
    overhead("deepspeed", 24, [12e-3, 14e-3, 16e-3]),
    overhead("eager", 24, [2.4e-3, 3e-3, 3.6e-3]),
]
# The 24-module stack again with a bias on every layer: through the engine 14.4-19.6 ms, eagerly 3.12-4.08 ms.
TWO_PARAMETERS = [
    overhead("deepspeed", 24, [14.4e-3, 15e-3, 19.6e-3], parameters_per_module=2),
    overhead("eager", 24, [3.12e-3, 3.5e-3, 4.08e-3], parameters_per_module=2),
]


def chain(links: int, numel: int, seconds: list[float]) -> OperatorChain:
    return OperatorChain(links=links, numel=numel, element_bytes=4, time=spread(seconds))


# On 16 elements: 4 links 40-60 us, 36 links 200-300 us; on 1,000,016 elements: 4 links 2.04-3.06 ms, 36
# links 16.2-24.3 ms (fastest to slowest repeat).
CHAINS = [
    chain(4, 16, [40e-6, 50e-6, 60e-6]),
    chain(36, 16, [200e-6, 250e-6, 300e-6]),
    chain(4, 1_000_016, [2.04e-3, 2.5e-3, 3.06e-3]),
    chain(36, 1_000_016, [16.2e-3, 20e-3, 24.3e-3]),
]


def bench(
    module_overhead: list[ModuleOverhead] | None = None, operator_chains: list[OperatorChain] | None = None
) -> Microbench:
    return Microbench(
        module_overhead=module_overhead or [],
        operator_chains=operator_chains or [],
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
        cpu_share=0.9,
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
    # the low end of a rate is the slowest repeat's, the low end of a time the fastest repeat's: each
    # product's time at its slowest and fastest repeat
    assert rates.forward_flop_per_s.low < rates.forward_flop_per_s.median < rates.forward_flop_per_s.high
    assert rates.linear_forward_s.low == pytest.approx(2 * a / 3e9 + b / 4e9)
    assert rates.linear_forward_s.high == pytest.approx(2 * a / 1e9 + b / 4e9)
    assert rates.cpu_update_param_per_s.low == 1e8 and rates.cpu_update_param_per_s.high == 3e8
    backward = 2 * (2.0 * 64 * 64 * 192) / 1e9 + 2 * (2.0 * 192 * 64 * 64) / 2e9
    assert rates.linear_backward_s.median == pytest.approx(backward)
    assert set(rates.copies) == {"host_to_host"}
    assert rates.cpu_update_param_per_s.median == 2e8 and rates.device_update_param_per_s is None
    assert "deepspeed_cpu_adam" in rates.cpu_update_param_per_s.source
    assert copy_key("host_to_device", True) == "host_to_device_pinned"
    assert rates.cpu_share == 0.9
    # on the CPU accelerator the device is host memory: an offload copy either way is a host copy
    assert (
        rates.copy("host_to_device", True)
        == rates.copy("device_to_host", False)
        == rates.copies["host_to_host"]
    )


def test_on_a_gpu_a_copy_is_looked_up_by_direction_and_pinning():
    rows = [
        CopyRate(route=route, pinned=pinned, size_bytes=1 << 20, rate=spread([rate, rate, rate]))
        for route, pinned, rate in [
            ("host_to_host", None, 5e9),
            ("host_to_device", True, 20e9),
            ("host_to_device", False, 8e9),
            ("device_to_host", True, 19e9),
        ]
    ]
    rates = rates_from_microbench(bench().model_copy(update={"accelerator": "cuda", "copies": rows}))
    assert rates.copy("host_to_device", True).median == 20e9
    assert rates.copy("host_to_device", False).median == 8e9
    assert rates.copy("device_to_host", False) is None  # not timed: the ledger says so
    assert rates.copy("host_to_host", True).median == 5e9


def test_rates_refuse_a_file_without_backward_products():
    without = bench().model_copy(update={"matmuls": [m for m in bench().matmuls if m.kind == "forward"]})
    with pytest.raises(ValueError, match="backward"):
        rates_from_microbench(without)


# --- the shapes: a model's linear layers, from its config ------------------------------------------------


def test_the_shapes_are_the_llama_models_linear_layers():
    """Every parameter of a Llama is a linear layer's weight, the embedding or a norm's scale: the shapes'
    weights plus those are the model's parameter count (tied: the head's weight is the embedding's)."""
    for tied in (False, True):
        shape = TINY.model_copy(update={"tie_word_embeddings": tied})
        config = planned_model_config(shape, vocab_size=50, seq_len=8)
        counts = count_parameters(config)
        shapes = linear_shapes(config)
        weights = sum(s.count * s.weight_numel for s in shapes) - sum(s.tied * s.weight_numel for s in shapes)
        embedding, norms = counts.vocab * counts.hidden, (2 * counts.layers + 1) * counts.hidden
        assert weights + embedding + norms == counts.total
        assert sum(s.count for s in shapes) == 7 * counts.layers + 1  # q, k, v, o, gate, up, down; the head
        assert sum(s.tied for s in shapes) == int(tied)
        head = next(s for s in shapes if "lm_head" in s.layers)
        assert (head.in_features, head.out_features) == (counts.hidden, counts.vocab)


def test_the_shapes_of_gpt2_read_its_conv1d_layers():
    """GPT-2's attention and MLP are transformers' Conv1D (weight in x out) with biases; its head is tied."""
    config = load_config(REPO / "config" / "models" / "gpt2.json")
    counts = count_parameters(config)
    shapes = linear_shapes(config)
    hidden, layers = counts.hidden, counts.layers
    weights = sum((s.count - s.tied) * s.weight_numel for s in shapes)
    biases = sum(s.biases * s.out_features for s in shapes)
    embeddings = (counts.vocab + config.n_positions) * hidden
    norms = (2 * layers + 1) * 2 * hidden  # LayerNorm: scale and shift
    assert weights + biases + embeddings + norms == counts.total
    widths = {(s.in_features, s.out_features) for s in shapes}
    assert {(hidden, 3 * hidden), (hidden, hidden), (hidden, 4 * hidden), (4 * hidden, hidden)} <= widths


def test_product_dims_are_the_products_autograd_runs_for_a_linear_layer():
    """The (m x k) @ (k x n) products of F.linear's forward and backward, as torch's profiler records
    them."""
    tokens, width_in, width_out = 7, 5, 3
    x = torch.randn(tokens, width_in, requires_grad=True)
    w = torch.randn(width_out, width_in, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.linear(x, w).sum().backward()
    recorded = {tuple(map(tuple, e.input_shapes[:2])) for e in prof.events() if e.name == "aten::mm"}
    ours = set()
    for kind in KINDS:
        m, n, k = product_dims(kind, tokens, width_in, width_out)
        ours.add(((m, k), (k, n)))
    assert ours == recorded


# --- the timing functions, on tiny sizes ---------------------------------------------------------------


@pytest.fixture
def short_batches(monkeypatch):
    """Batches of about a millisecond and a budget of a few: the loop as it runs, quickly."""
    monkeypatch.setattr(runtime_microbench, "REPEAT_S", 0.001)
    monkeypatch.setattr(predict_microbench, "COLD_POOL_BYTES", 1 << 20)
    monkeypatch.setitem(predict_microbench.BUDGET_S, "matmuls", 0.01)
    monkeypatch.setitem(predict_microbench.BUDGET_S, "optimizer", 0.01)
    monkeypatch.setitem(predict_microbench.BUDGET_S, "operators", 0.01)


def test_products_copies_and_updates_give_positive_rates_with_spreads(short_batches):
    for kind in KINDS:
        call = product_call(kind, 4, 8, 16, torch.float32, "cpu")
        check_spread(spread_of(rate_samples(call, 2.0 * 4 * 8 * 16, budget_s=0.01)))
    check_spread(spread_of(rate_samples(copy_call("host_to_host", 4096, None), 4096, budget_s=0.01)))
    check_spread(spread_of(rate_samples(update_call("torch_adamw", 1000), 1000, budget_s=0.01)))


def check_spread(spread: Spread) -> None:
    assert len(spread.samples) >= MIN_REPEATS
    assert all(s > 0 for s in spread.samples)
    assert 0 < spread.q1 <= spread.median <= spread.q3
    assert spread.cpu_share is not None and spread.cpu_share > 0


def test_the_products_of_every_shape_are_timed_at_the_runs_rows(short_batches):
    shapes = [LinearShape(in_features=8, out_features=16, count=3, layers=("a.*.up",))]
    rows = [MatmulRate.of(r, "test") for r in matmul_rows(shapes, 4, torch.float32, "cpu", "cpu")]
    assert [r.kind for r in rows] == list(KINDS)
    assert {(r.m, r.n, r.k) for r in rows} == {(4, 16, 8), (4, 8, 16), (16, 8, 4)}
    assert all(r.timed_rows == 4 and r.count == 3 and r.flop_per_call == 2 * 4 * 8 * 16 for r in rows)
    assert all((r.timed_in_features, r.timed_out_features) == (8, 16) for r in rows)


def test_a_large_cpu_product_is_timed_on_a_slice_cut_along_its_largest_dimension_first():
    assert timed_shape(512, 64, 64, "cpu") == (512, 64, 64)
    assert timed_shape(4096, 5120, 152064, "cuda") == (4096, 5120, 152064)
    # A vocabulary-wide head keeps the run's rows and width: only the vocabulary is cut.
    rows, width, vocab = timed_shape(1024, 512, 50304, "cpu")
    assert (rows, width) == (1024, 512) and 1024 <= vocab < 50304
    assert 2.0 * rows * width * vocab <= CPU_PRODUCT_FLOP_CAP < 2.0 * rows * width * (vocab + 1)
    # Cut to below the next largest: the two largest together, then all three, never under 1.
    rows, width, vocab = timed_shape(4096, 5120, 152064, "cpu")
    assert rows == width == vocab and 2.0 * rows**3 <= CPU_PRODUCT_FLOP_CAP
    two = timed_shape(64, 8192, 152064, "cpu")
    assert two[0] == 64 and two[1] == two[2] and 64 <= two[1] < 8192
    assert 2.0 * math.prod(two) <= CPU_PRODUCT_FLOP_CAP


def test_without_a_built_cpu_adam_torchs_adamw_is_timed_and_named(tmp_path, monkeypatch, short_batches):
    monkeypatch.setenv(EXTENSIONS_DIR_VARIABLE, str(tmp_path))
    built, why = cpu_adam_built(installed=False)
    assert not built and "torch's AdamW" in why
    assert cpu_adam_built(installed=True)[0]
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").touch()
    assert cpu_adam_built(installed=False) == (
        True,
        f"DeepSpeed's CPU Adam op, built in {tmp_path / 'cpu_adam'}",
    )
    row = OptimizerRate.of(optimizer_rows(500, 1, "cpu", cpu_adam=(built, why))[0], "test")
    assert row.implementation == "torch_adamw" and row.parameters == 500 and row.rate.median > 0
    assert row.why == why


def test_the_module_lines_give_a_fixed_cost_and_a_cost_per_module_by_hand():
    lines = rates_from_microbench(bench(OVERHEAD)).module_lines
    assert lines is not None and lines.stage == 3
    # Lines through the fastest and the slowest repeats: engine low 2 ms + (n - 4) x 10/20 ms, high 4 ms +
    # (n - 4) x 12/20 ms; eager per module 2/20 ms (low) and 3/20 ms (high).
    assert lines.per_module() == pytest.approx((10e-3 / 20, 12e-3 / 20))
    # Without the stack of two parameters a module, no cost per parameter: the parameters change nothing.
    assert lines.per_parameter() is None
    low, high = lines.seconds(hooked=9, modules=33, parameters=(16, 21))
    assert low == pytest.approx(2e-3 + 5 * 10e-3 / 20 + 24 * 2e-3 / 20)
    assert high == pytest.approx(4e-3 + 5 * 12e-3 / 20 + 24 * 3e-3 / 20)
    # Every module hooked: the engine's line alone.
    assert lines.seconds(33, 33, (33, 33))[0] == pytest.approx(2e-3 + 29 * 10e-3 / 20)


def test_the_stack_of_two_parameters_a_module_gives_a_cost_per_parameter_by_hand():
    lines = rates_from_microbench(bench(OVERHEAD + TWO_PARAMETERS)).module_lines
    # Through the engine (14.4 - 12) / 24 ms (fastest repeats) and (19.6 - 16) / 24 ms (slowest) per
    # parameter more; eagerly (3.12 - 2.4) / 24 and (4.08 - 3.6) / 24 ms.
    assert lines.per_parameter() == pytest.approx((0.1e-3, 0.15e-3))
    assert lines.per_module() == pytest.approx((10e-3 / 20, 12e-3 / 20))
    low, high = lines.seconds(hooked=9, modules=33, parameters=(16, 21))
    # The engine's line at 9 modules, 7 (fast end) or 12 (slow end) parameters more at the engine's cost,
    # and 24 eager modules at the eager cost per module less its parameter's.
    assert low == pytest.approx(2e-3 + 5 * 0.5e-3 + 7 * 0.1e-3 + 24 * (0.1e-3 - 0.03e-3))
    assert high == pytest.approx(4e-3 + 5 * 0.6e-3 + 12 * 0.15e-3 + 24 * (0.15e-3 - 0.02e-3))
    # Fewer parameters than hooked modules: the modules without one cost less than the stack's.
    assert lines.seconds(33, 33, (21, 21))[0] == pytest.approx(2e-3 + 29 * 0.5e-3 - 12 * 0.1e-3)
    assert "of 24 with a bias each" in lines.source


def test_the_operator_lines_give_a_cost_per_op_and_per_byte_by_hand():
    lines = rates_from_microbench(bench(operator_chains=CHAINS)).operator_lines
    assert lines is not None
    # 32 links more, 2 ops a link: on 16 elements (200 - 40) / 64 us and (300 - 60) / 64 us per op.
    assert lines.dispatch_s == pytest.approx((160e-6 / 64, 240e-6 / 64))
    # On 1,000,016 elements each op reads and writes 1,000,000 elements (4 B) more: ((16.2 - 2.04) ms / 64 -
    # 2.5 us) per 8 MB at the fast end, ((24.3 - 3.06) ms / 64 - 3.75 us) at the slow one.
    fast, slow = (14.16e-3 / 64 - 160e-6 / 64) / 8e6, (21.24e-3 / 64 - 240e-6 / 64) / 8e6
    assert lines.per_byte_s == {1_000_016: pytest.approx((fast, slow))}
    assert "ATen ops a link" in lines.source
    # At that size, and at any size below it or above it (the only one timed), the bytes cost that.
    for numel in (10, 1_000_016, 10**9):
        assert lines.traffic_s({numel: 5e6}) == pytest.approx((5e6 * fast, 5e6 * slow))


# A third size, 4,000,016 elements (the logits'), at 1 and 4 links: 3 links more, 6 ops, (24.0 - 6.2) ms
# at the fastest repeats and (30.0 - 7.6) ms at the slowest.
LOGITS_CHAINS_ROWS = [chain(1, 4_000_016, [6.2e-3, 7e-3, 7.6e-3]), chain(4, 4_000_016, [24e-3, 27e-3, 30e-3])]


def test_each_size_timed_has_its_cost_per_byte_and_a_size_between_two_may_cost_either():
    lines = rates_from_microbench(bench(operator_chains=CHAINS + LOGITS_CHAINS_ROWS)).operator_lines
    assert lines is not None
    # The dispatch is still the smallest chains' alone.
    assert lines.dispatch_s == pytest.approx((160e-6 / 64, 240e-6 / 64))
    activation = lines.per_byte_s[1_000_016]
    # Each op of the logits' chain moves 2 x 4,000,000 x 4 B more than one on 16 elements.
    logits = ((17.8e-3 / 6 - 160e-6 / 64) / 32e6, (22.4e-3 / 6 - 240e-6 / 64) / 32e6)
    assert lines.per_byte_s[4_000_016] == pytest.approx(logits)
    assert logits[0] > activation[1]  # the test's logits cost more a byte, as the host's do beyond its caches
    assert lines.traffic_s({1_000_016: 1e6, 4_000_016: 2e6}) == pytest.approx(
        (1e6 * activation[0] + 2e6 * logits[0], 1e6 * activation[1] + 2e6 * logits[1])
    )
    # Between the two sizes: from the cheaper size's fastest to the dearer's slowest.
    assert lines.traffic_s({2_000_000: 1e6}) == pytest.approx((1e6 * activation[0], 1e6 * logits[1]))
    assert "1 and 4 links on 4000016" in lines.source


def test_without_chains_at_two_lengths_and_two_sizes_there_are_no_operator_lines():
    assert rates_from_microbench(bench()).operator_lines is None
    assert rates_from_microbench(bench(operator_chains=CHAINS[:3])).operator_lines is None


def test_a_chain_link_dispatches_its_ops_per_link_and_times_in_seconds(short_batches):
    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    counted = {}
    for links in OPERATOR_CHAINS:
        with Count() as mode:
            chain_step(links, 16)()
        counted[links] = mode.ops
    short, long = OPERATOR_CHAINS
    assert counted[long] - counted[short] == OPS_PER_LINK * (long - short)
    rows = operator_chain_rows(64, 256, torch.float32)
    expected = {(n, m) for n in OPERATOR_CHAINS for m in (16, 64)} | {(n, 256) for n in LOGITS_CHAINS}
    assert {(r["links"], r["numel"]) for r in rows} == expected
    for row in rows:
        check_spread(row["chain_time(s)"])
    # Logits no larger than the activation: no third size.
    assert {r["numel"] for r in operator_chain_rows(64, 64, torch.float32)} == {16, 64}


def test_module_lines_that_cross_still_give_the_lower_end_first():
    # The fastest repeats' line (1 -> 20 ms) steeper than the slowest's (9 -> 21 ms): past where they cross,
    # the fastest repeats' end is the higher one.
    crossing = [
        overhead("deepspeed", 4, [1e-3, 9e-3]),
        overhead("eager", 4, [0.4e-3, 0.6e-3]),
        overhead("deepspeed", 24, [20e-3, 21e-3]),
        overhead("eager", 24, [2.4e-3, 3.6e-3]),
    ]
    lines = rates_from_microbench(bench(crossing)).module_lines
    assert lines.seconds(hooked=100, modules=100, parameters=(100, 100)) == pytest.approx(
        (9e-3 + 96 * 12e-3 / 20, 1e-3 + 96 * 19e-3 / 20)
    )


def test_without_both_stacks_at_two_sizes_there_are_no_module_lines():
    assert rates_from_microbench(bench()).module_lines is None
    assert rates_from_microbench(bench(OVERHEAD[:3])).module_lines is None


def test_the_stacks_run_the_runs_zero_settings_without_a_boundary_or_persistent_parameters():
    ds = DsConfig.of(
        {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 8,
            "train_batch_size": 16,
            "zero_optimization": {
                "stage": 3,
                "offload_optimizer": {"device": "cpu"},
                "stage3_param_persistence_threshold": 640,
                "leaf_module": {"classes": ["LlamaDecoderLayer"]},
            },
        },
        "ds_config.json",
    )
    config = stack_config(ds)
    zero = config["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_optimizer"] == {"device": "cpu"}
    assert zero["stage3_param_persistence_threshold"] == 0 and "leaf_module" not in zero
    assert config["gradient_accumulation_steps"] == NO_BOUNDARY
    assert config["train_batch_size"] == NO_BOUNDARY  # one rank's micro-batch of 1
    assert ds.gradient_accumulation_steps == 8  # the run's config untouched
    assert len(MODULE_STACKS) == 2 and MODULE_STACKS[0] < MODULE_STACKS[1]
    # Each size with one parameter a module, and the larger again with two.
    assert [(s.modules, s.parameters_per_module) for s in stack_shapes(64)] == [
        (MODULE_STACKS[0], 1),
        (MODULE_STACKS[1], 1),
        (MODULE_STACKS[1], 2),
    ]


def _ds(zero: dict) -> DsConfig:
    return DsConfig.of(
        {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "train_batch_size": 1,
            "zero_optimization": zero,
        },
        "ds_config.json",
    )


def test_the_eager_stacks_call_the_runs_linear_function_whatever_ran_before():
    from deepspeed.runtime.zero.linear import zero3_linear_wrap

    assert runs_zero3_linear(_ds({"stage": 3}))
    assert not runs_zero3_linear(_ds({"stage": 3, "memory_efficient_linear": False}))
    assert not runs_zero3_linear(_ds({"stage": 2}))
    functional = torch.nn.functional
    before = functional.linear
    with linear_function(zero3_linear=True):
        assert functional.linear is zero3_linear_wrap
        # A ZeRO-3 engine built earlier in the process leaves DeepSpeed's function installed: a run below
        # stage 3 still times torch's own.
        with linear_function(zero3_linear=False):
            assert functional.linear is torch._C._nn.linear
    assert functional.linear is before


def test_a_stack_has_one_or_two_parameters_a_module_and_times_in_seconds(short_batches):
    model = stack(StackShape(5, 8, 4))
    assert len(list(model.children())) == 5 and len(list(model.parameters())) == 5
    assert len(list(stack(StackShape(5, 8, 4, parameters_per_module=2)).parameters())) == 10
    with pytest.raises(ValueError, match="1 or 2 parameters"):
        StackShape(5, 8, 4, parameters_per_module=3)
    timed = time_eager(StackShape(3, 8, 4), budget_s=0.01)
    check_spread(timed)
    assert timed.median < 0.1  # seconds per micro-step of three 8 x 8 layers, not calls per second


def test_the_counts_record_every_module_and_those_inside_the_decoder_layers():
    counts = count_parameters(planned_model_config(TINY, 64, 16))
    # LlamaForCausalLM, LlamaModel, embed_tokens, the layers' ModuleList, final norm, rotary embedding,
    # lm_head; each LlamaDecoderLayer, and inside it self_attn (q, k, v, o), mlp (gate, up, down, act_fn) and
    # two norms: 12.
    assert counts.modules == 7 + 2 * 13
    assert counts.modules_in_blocks == 2 * 12


def test_a_two_parameter_stack_without_its_one_parameter_twin_in_both_engines_gives_no_cost_per_parameter():
    # The eager one-parameter stacks timed at 4 and 12 modules, the two-parameter ones at 24: nothing to
    # subtract them from eagerly, so no cost per parameter (and no error).
    eager_elsewhere = [
        OVERHEAD[0],
        OVERHEAD[1],
        OVERHEAD[2],
        overhead("eager", 12, [1.2e-3, 1.5e-3, 1.8e-3]),
        *TWO_PARAMETERS,
    ]
    lines = rates_from_microbench(bench(eager_elsewhere)).module_lines
    assert lines is not None and lines.per_parameter() is None
    assert "with a bias" not in lines.source


def test_products_on_a_pool_cycle_their_operands_through_it():
    """With a pool each call reads the next slice's operands, cycling; the result is the same product."""
    pool = operand_pool(3 * (4 * 8 + 16 * 8) * 4 + 4, torch.float32, "cpu")  # three (x, W) pairs and a bit
    assert pool.numel() == 3 * (4 * 8 + 16 * 8) + 1 and bool((pool == 0.01).all())
    pool[: 4 * 8 + 16 * 8] = 1.0  # the first pair's operands differ from the others'
    call = product_call("forward", 4, 8, 16, torch.float32, "cpu", pool)
    outputs = [call() for _ in range(4)]
    assert all(o.shape == (4, 16) for o in outputs)
    assert float(outputs[0][0, 0]) == pytest.approx(8.0)  # x and W of ones: 8 products of 1 summed
    assert float(outputs[1][0, 0]) == pytest.approx(8 * 0.01**2)  # the next pair
    assert float(outputs[3][0, 0]) == pytest.approx(8.0)  # after three pairs, the first again
    for kind, shape in (("backward_input", (4, 8)), ("backward_weight", (16, 8))):
        assert product_call(kind, 4, 8, 16, torch.float32, "cpu", pool)().shape == shape
    # A pool smaller than one pair: one pair, used every call.
    small = operand_pool(8, torch.float32, "cpu")
    assert product_call("backward_weight", 4, 8, 16, torch.float32, "cpu", small)().shape == (16, 8)
    with pytest.raises(KeyError):
        product_call("sideways", 4, 8, 16, torch.float32, "cpu", pool)


def test_the_pool_is_what_a_steps_products_read_capped():
    """Every layer's input, weight and output gradient once: a small model's operands stay a small pool (timed
    as warm as its step finds them), a large model's are capped at COLD_POOL_BYTES."""
    shapes = [
        LinearShape(in_features=8, out_features=16, count=3, layers=("a.*.up",)),
        LinearShape(in_features=16, out_features=8, count=2, layers=("a.*.down",)),
    ]
    per_layer = {(8, 16): 4 * 8 + 16 * 8 + 4 * 16, (16, 8): 4 * 16 + 8 * 16 + 4 * 8}
    assert predict_microbench.operand_pool_bytes(shapes, 4, 4) == 4 * (
        3 * per_layer[8, 16] + 2 * per_layer[16, 8]
    )
    wide = [LinearShape(in_features=8192, out_features=8192, count=64, layers=("a.*.up",))]
    assert predict_microbench.operand_pool_bytes(wide, 4096, 4) == predict_microbench.COLD_POOL_BYTES
