"""The activation trace against exact hand counts of tiny models, its scaling rules, and the claim shape's
figures measured with such a trace (docs/reference.md section 1)."""

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPTNeoConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
)

from zerogate.model.hf_config import load_config
from zerogate.predict.operator_tally import OperatorTally, operator_kind
from zerogate.predict.trace import (
    MicroStep,
    _LiveBytes,
    _trace_step,
    operator_traffic,
    trace_micro_step,
)

MODELS = Path(__file__).resolve().parents[2] / "config" / "models"
MIB = 2**20

# A tiny Llama: hidden h, a heads of d = h / a, g KV heads, MLP width I, vocabulary V. Sequence S differs
# from d so that no two of the enumerated shapes coincide.
H, A, G, D, I, V, S = 64, 4, 2, 16, 96, 256, 24  # noqa: E741 (the MLP width is I in the paper's notation)


def tiny_llama(layers: int = 3) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=I,
        num_hidden_layers=layers,
        num_attention_heads=A,
        num_key_value_heads=G,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )


def rms_norm_bytes(e: int, b: int, s: int) -> int:
    """LlamaRMSNorm (transformers modeling_llama): hidden.to(float32) saved by pow (4 bsh; in fp32 the input
    itself), rsqrt's output (4 bs), the normalised product cast back to the dtype (e bsh; in fp32 the product
    itself) saved for the weight's gradient, and weight * that (e bsh), saved by the next projections."""
    return 4 * b * s * H + 4 * b * s + 2 * e * b * s * H


def llama_layer_bytes(e: int, attention: str, b: int = 1, s: int = S) -> int:
    """Every tensor one decoder layer saves, by hand, with a padding mask (so SDPA repeats the KV heads)."""
    if attention == "sdpa":
        attention_bytes = (
            e * b * s * s  # SDPA's boolean mask converted to an additive one, per call
            + 3 * e * b * A * s * D  # q after rotary, k and v repeated to A heads
            + e * b * A * s * D  # the output
            + 4 * b * A * s
        )  # logsumexp, fp32
    else:
        attention_bytes = (
            2 * e * b * A * s * D  # q and repeated k, for q k^T
            + 4 * b * A * s * s  # softmax(dtype=float32)'s output
            + (e * b * A * s * s if e == 2 else 0)  # the probabilities cast back (no-op in fp32)
            + e * b * A * s * D  # repeated v, for probabilities @ v
            + e * b * s * H
        )  # o_proj's input: the transposed output made contiguous
    mlp_bytes = 4 * e * b * s * I  # gate, up, silu(gate), silu(gate) * up
    return 2 * rms_norm_bytes(e, b, s) + attention_bytes + mlp_bytes


def llama_outside_bytes(e: int, b: int = 1, s: int = S) -> int:
    return (
        8 * b * s  # input ids, saved by the embedding
        + 2 * e * b * s * D  # rotary cos and sin, shared by every layer
        + rms_norm_bytes(e, b, s)  # the final norm
        + 4 * b * s * V  # log_softmax of the fp32 logits (ForCausalLMLoss upcasts them)
        + 8 * b * (s + 1)  # nll_loss's target: the labels padded by one and shifted (a view, b = 1)
        + 4
    )  # nll_loss's total weight, an fp32 scalar


@pytest.mark.parametrize("dtype, e", [("fp16", 2), ("bf16", 2), ("fp32", 4)])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_llama_layer_and_the_rest_save_exactly_the_enumerated_tensors(dtype, e, attention):
    trace = trace_micro_step(tiny_llama(), MicroStep(1, S, dtype, attention))
    assert trace.per_layer_bytes == llama_layer_bytes(e, attention)
    assert trace.outside_layers_bytes == llama_outside_bytes(e)
    assert trace.layers == 3
    assert trace.total_bytes == 3 * llama_layer_bytes(e, attention) + llama_outside_bytes(e)


def test_the_backward_transient_is_the_logits_gradients_in_flight():
    # At log_softmax's backward the gradients of its output and of its input (fp32, 4 bsV each) are both
    # alive, and nll_loss's backward has released its saved target (b (s + 1) int64); its total weight and
    # the loss's gradient, fp32 scalars, trade places. Weight gradients are not part of it.
    trace = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa"))
    assert trace.backward_transient_bytes == 8 * S * V - 8 * (S + 1)


@pytest.mark.parametrize("dtype, e", [("fp16", 2), ("bf16", 2), ("fp32", 4)])
def test_the_loss_in_the_logits_dtype_keeps_its_log_softmax_and_gradients_in_that_dtype(dtype, e):
    # Without ForCausalLMLoss's upcast, log_softmax saves its output in the logits' dtype (and nll_loss its
    # total-weight scalar), and the backward's two logits-sized gradients are in it too, so the backward's
    # peak is no longer theirs alone (the head's weight gradient in flight can top it); in fp32 the upcast
    # was a no-op, so nothing changes.
    upcast = trace_micro_step(tiny_llama(), MicroStep(1, S, dtype, "sdpa"))
    own = trace_micro_step(tiny_llama(), MicroStep(1, S, dtype, "sdpa", loss_in_fp32=False))
    assert own.per_layer_bytes == upcast.per_layer_bytes
    assert own.outside_layers_bytes == llama_outside_bytes(e) - (4 - e) * (S * V + 1)
    assert own.backward_transient_bytes >= 2 * e * S * V - 8 * (S + 1)
    if dtype == "fp32":
        assert (own.total_bytes, own.backward_transient_bytes) == (
            upcast.total_bytes,
            upcast.backward_transient_bytes,
        )
    else:
        assert (
            own.total_bytes < upcast.total_bytes
            and own.backward_transient_bytes < upcast.backward_transient_bytes
        )


def test_16_bit_tensors_take_twice_their_bytes_in_fp32_where_no_op_upcasts():
    # GPT-2's layers (LayerNorm, eager attention, no dropout) keep nothing in fp32, so fp32 doubles them
    # exactly; Llama's RMSNorm upcasts, so there fp32 is less than twice (the enumeration above says by how
    # much).
    gpt2 = GPT2Config(
        vocab_size=V,
        n_embd=H,
        n_layer=2,
        n_head=A,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    half = trace_micro_step(gpt2, MicroStep(1, S, "fp16", "eager"))
    full = trace_micro_step(gpt2, MicroStep(1, S, "fp32", "eager"))
    assert full.per_layer_bytes == 2 * half.per_layer_bytes
    llama_half = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa")).per_layer_bytes
    llama_full = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp32", "sdpa")).per_layer_bytes
    assert llama_half < llama_full < 2 * llama_half


def test_checkpointing_leaves_each_layer_only_its_input():
    plain = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa"))
    checkpointed = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa", checkpointing=True))
    assert checkpointed.per_layer_bytes == 2 * S * H  # the hidden state entering the layer, fp16
    assert plain.per_layer_bytes > 10 * checkpointed.per_layer_bytes
    # Kept for the recomputations besides: rotary cos/sin, the 4-D boolean mask and the position ids that
    # transformers binds into each checkpointed call, instead of each layer's converted mask.
    assert checkpointed.outside_layers_bytes == plain.outside_layers_bytes + S * S + 8 * S


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_saved_tensors_are_all_the_forward_leaves_alive(checkpointing):
    # Live bytes at the end of the forward, counted op by op, against the saved-tensor count: they differ
    # only by the input ids (saved, but made before the op counting starts: 8 bs) and the loss (alive, fp32
    # scalar).
    step = _trace_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa", checkpointing, padding_mask=True))
    assert step.live_bytes_at_forward_end == step.saved_bytes - 8 * S + 4


def test_the_first_accumulated_gradient_is_the_heads_once_the_logits_gradients_are_gone():
    # Untied, the head's weight gradient (fp16, e V H) is the first accumulated; by then log_softmax's
    # output (fp32, 4 s V), nll_loss's target (8 (s + 1)) and both logits' gradients are gone. What ZeRO-1/2
    # allocate their buckets beside is that, not the forward's end.
    trace = trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa"))
    assert trace.at_first_gradient_bytes == trace.total_bytes + 2 * V * H - 4 * S * V - 8 * (S + 1)
    # From then on the backward releases more than it makes: the head's gradient was the largest in flight.
    assert trace.after_first_gradient_bytes < 2 * V * H


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_backwards_split_at_the_first_gradient_scales_as_the_whole_model_traces_it(tied, checkpointing):
    # Tied, the backward's peak after the first gradient falls at its end (the head's and the embedding's
    # gradients summed once every layer's activations are gone); untied, early: the scaled figures are the
    # whole model's either way.
    config = LlamaConfig(**{**tiny_llama(6).to_dict(), "tie_word_embeddings": tied})
    scaled = trace_micro_step(config, MicroStep(1, S, "fp16", "sdpa", checkpointing))
    whole = _trace_step(config, MicroStep(1, S, "fp16", "sdpa", checkpointing, padding_mask=True))
    assert scaled.total_bytes == whole.saved_bytes
    assert scaled.at_first_gradient_bytes == whole.saved_bytes + whole.at_first_gradient_change
    assert scaled.after_first_gradient_bytes == whole.after_first_gradient_bytes
    assert scaled.backward_transient_bytes == whole.transient_bytes
    assert scaled.size_classes == whole.size_classes


def test_the_size_classes_put_storages_above_32_mib_apart_and_peak_at_least_the_total():
    """With a vocabulary of 40,000 at fp32 and 256 positions the logits (and their fp32 loss copies) are
    39 MiB each, above glibc's 32 MiB heap limit: the forward's mapped class holds them; a vocabulary of 256
    maps nothing. Each window's class peaks together reach at least what the ledger counts in that window."""
    from zerogate.runtime.heap import GLIBC_MMAP_THRESHOLD_MAX_BYTES

    seq, vocab = 256, 40_000
    assert seq * vocab * 4 > GLIBC_MMAP_THRESHOLD_MAX_BYTES
    large = trace_micro_step(
        LlamaConfig(**{**tiny_llama().to_dict(), "vocab_size": vocab}), MicroStep(1, seq, "fp32", "sdpa")
    )
    assert large.size_classes["forward"]["mapped"] >= seq * vocab * 4
    assert sum(large.size_classes["forward"].values()) >= large.total_bytes
    backward_peak = large.total_bytes + large.backward_transient_bytes
    assert sum(large.size_classes["backward"].values()) >= backward_peak
    small = trace_micro_step(tiny_llama(), MicroStep(1, seq, "fp32", "sdpa"))
    assert {window: peaks["mapped"] for window, peaks in small.size_classes.items()} == {
        "forward": 0,
        "backward": 0,
        "backward_from_first_gradient": 0,
    }
    # The forward's peak is inside it (a layer's intermediates beside what it keeps), above what it keeps.
    assert small.size_classes["forward"]["heap"] >= small.total_bytes


def test_eager_saves_more_than_sdpa_once_the_sequence_is_long():
    # Eager keeps the s x s probabilities (fp32 and fp16), SDPA's fused kernel only logsumexp: the gap grows
    # as s^2 and passes the few s-linear tensors eager saves less of.
    short, long = 8, 128
    gap = {
        s: trace_micro_step(tiny_llama(), MicroStep(1, s, "fp16", "eager")).per_layer_bytes
        - trace_micro_step(tiny_llama(), MicroStep(1, s, "fp16", "sdpa")).per_layer_bytes
        for s in (short, long)
    }
    assert gap[long] > 0
    assert gap[long] > 100 * abs(gap[short])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_per_layer_figure_does_not_depend_on_which_layer_counts_are_traced(attention):
    first = trace_micro_step(tiny_llama(6), MicroStep(1, S, "fp16", attention), traced_layers=1)
    later = trace_micro_step(tiny_llama(6), MicroStep(1, S, "fp16", attention), traced_layers=3)
    assert (later.per_layer_bytes, later.outside_layers_bytes) == (
        first.per_layer_bytes,
        first.outside_layers_bytes,
    )
    assert later.backward_transient_bytes == first.backward_transient_bytes


def test_layer_bytes_grow_linearly_with_the_micro_batch():
    assert (
        trace_micro_step(tiny_llama(), MicroStep(2, S, "fp16", "sdpa")).per_layer_bytes
        == 2 * trace_micro_step(tiny_llama(), MicroStep(1, S, "fp16", "sdpa")).per_layer_bytes
    )


def test_a_config_mixing_layer_types_is_traced_whole_and_says_so():
    mixed = Qwen2Config(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=I,
        num_hidden_layers=3,
        num_attention_heads=A,
        num_key_value_heads=G,
        max_position_embeddings=256,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
    )
    assert len(set(mixed.layer_types)) == 2
    trace = trace_micro_step(mixed, MicroStep(1, S, "fp16", "sdpa"))
    assert trace.per_layer_bytes is None and trace.outside_layers_bytes is None
    assert "traced (not scaled)" in trace.how and "sliding_attention" in trace.how
    # A window changes which scores are masked, not what is saved: the whole-model trace equals the
    # scaled trace of the same model with one layer type.
    uniform = Qwen2Config(**{**mixed.to_dict(), "use_sliding_window": False, "layer_types": None})
    assert trace.total_bytes == trace_micro_step(uniform, MicroStep(1, S, "fp16", "sdpa")).total_bytes


def test_sdpa_with_attention_dropout_is_flagged_as_the_cpu_math_kernel():
    gpt2 = GPT2Config(vocab_size=V, n_embd=H, n_layer=2, n_head=A, n_positions=64)  # dropout 0.1 everywhere
    with_dropout = trace_micro_step(gpt2, MicroStep(1, S, "fp16", "sdpa"))
    assert with_dropout.layers == 2
    assert "math kernel" in with_dropout.how  # CPU SDPA saved the s x s probabilities
    no_dropout = GPT2Config(**{**gpt2.to_dict(), "attn_pdrop": 0.0})
    assert "math kernel" not in trace_micro_step(no_dropout, MicroStep(1, S, "fp16", "sdpa")).how
    assert "math kernel" not in trace_micro_step(gpt2, MicroStep(1, S, "fp16", "eager")).how


def test_shipped_gpt2_xl_config_traces_with_its_own_key_names():
    trace = trace_micro_step(load_config(MODELS / "gpt2-xl.json"), MicroStep(1, 128, "fp16", "eager"))
    assert trace.layers == 48
    assert trace.per_layer_bytes > 0 and trace.outside_layers_bytes > 4 * 128 * 50257  # its fp32 log_softmax


def test_mistral_layers_save_what_llama_layers_of_the_same_shape_save():
    # Mistral-7B and Llama-3-8B share h 4096, 32 heads, 8 KV heads, MLP 14336; Mistral's 4096-token sliding
    # window is wider than the sequence. Outside the layers they differ by the fp32 log_softmax of their
    # vocabularies (32000 and 128256).
    mistral = trace_micro_step(load_config(MODELS / "mistral-7b.json"), MicroStep(1, 256, "fp16", "sdpa"))
    llama = trace_micro_step(load_config(MODELS / "llama-3-8b.json"), MicroStep(1, 256, "fp16", "sdpa"))
    assert mistral.per_layer_bytes == llama.per_layer_bytes
    assert llama.outside_layers_bytes - mistral.outside_layers_bytes == 4 * 256 * (128256 - 32000)
    tiny_mistral = MistralConfig(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=I,
        num_hidden_layers=2,
        num_attention_heads=A,
        num_key_value_heads=G,
        max_position_embeddings=256,
        sliding_window=8,
    )
    assert trace_micro_step(
        tiny_mistral, MicroStep(1, S, "fp16", "sdpa")
    ).per_layer_bytes == llama_layer_bytes(2, "sdpa")


def test_the_claim_shape_matches_the_reference_trace():
    # docs/reference.md section 1, measured 2026-12-01: Qwen2.5-14B, fp16, sequence 512, micro-batch 1:
    # 114.6 MiB per decoder layer with SDPA, 174.0 MiB with eager, 317.3 MiB outside the layers. Tolerance
    # 1 %: the reference is quoted to 0.1 MiB. (About 2 s on the 2-core development machine.)
    config = load_config(MODELS / "qwen2.5-14b.json")
    sdpa = trace_micro_step(config, MicroStep(1, 512, "fp16", "sdpa"))
    eager = trace_micro_step(config, MicroStep(1, 512, "fp16", "eager"))
    assert sdpa.per_layer_bytes / MIB == pytest.approx(114.6, rel=0.01)
    assert eager.per_layer_bytes / MIB == pytest.approx(174.0, rel=0.01)
    assert sdpa.outside_layers_bytes / MIB == pytest.approx(317.3, rel=0.01)
    assert sdpa.layers == 48


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dtype": "fp8"}, "dtype"),
        ({"attention": "flash_attention_2"}, "attention"),
        ({"seq_len": 0}, "positive"),
        ({"seq_len": 4096}, "positions"),
    ],
)
def test_bad_arguments_are_refused(change, message):
    arguments = {"micro_batch": 1, "seq_len": S, "dtype": "fp16", "attention": "sdpa", **change}
    with pytest.raises(ValueError, match=message):
        trace_micro_step(tiny_llama(), MicroStep(**arguments))


def test_layer_types_that_repeat_are_traced_by_periods_and_scale_as_the_whole_model_traces_them():
    # Gemma-2's pattern: sliding and global layers alternating (period 2), six layers.
    alternating = Qwen2Config(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=I,
        num_hidden_layers=6,
        num_attention_heads=A,
        num_key_value_heads=G,
        max_position_embeddings=256,
        use_sliding_window=True,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"] * 3,
    )
    step = MicroStep(1, S, "fp16", "sdpa", padding_mask=True)
    scaled = trace_micro_step(alternating, step)
    assert "periods of 2 decoder layers" in scaled.how and "not scaled" not in scaled.how
    whole = _trace_step(alternating, step)
    assert scaled.total_bytes == whole.saved_bytes
    assert scaled.at_first_gradient_bytes == whole.saved_bytes + whole.at_first_gradient_change
    assert scaled.after_first_gradient_bytes == whole.after_first_gradient_bytes
    assert scaled.backward_transient_bytes == whole.transient_bytes
    # Types that do not repeat are still traced whole.
    odd_types = ["sliding_attention"] * 5 + ["full_attention"]
    odd = Qwen2Config(**{**alternating.to_dict(), "layer_types": odd_types})
    assert "do not repeat" in trace_micro_step(odd, step).how


def test_gpt_neos_global_and_local_layers_are_traced_by_periods_as_the_whole_model_traces_them():
    # GPT-Neo names its alternating layers attention_layers, built from attention_types.
    config = GPTNeoConfig(
        vocab_size=V,
        hidden_size=H,
        num_layers=6,
        num_heads=A,
        attention_types=[[["global", "local"], 3]],
        window_size=8,
        max_position_embeddings=256,
    )
    step = MicroStep(1, S, "fp16", "eager", padding_mask=True)
    scaled = trace_micro_step(config, step)
    assert "periods of 2 decoder layers" in scaled.how
    assert scaled.total_bytes == _trace_step(config, step).saved_bytes


class _Ops(TorchDispatchMode):
    """Every computing op dispatched under it, by name, as the trace's tally classifies them."""

    def __init__(self) -> None:
        super().__init__()
        self.computing: Counter = Counter()
        self.traffic_bytes = 0
        self.logits_bytes = 0  # the bytes of the ops whose largest tensor is the logits (1 x S x V)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if operator_kind(func.namespace, name, func.is_view) == "computing":
            self.computing[name] += 1
            traffic, largest = operator_traffic(args, kwargs, out)
            self.traffic_bytes += traffic
            self.logits_bytes += traffic if largest == S * V else 0
        return out


# What a real run checks of its padding mask's values (transformers' mask helpers), which fake tensors
# cannot run: the only computing ops the trace may miss.
DATA_DEPENDENT = {"eq", "sum", "_local_scalar_dense"}


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_the_traced_operators_are_those_a_real_eager_micro_step_dispatches(attention, monkeypatch):
    config = tiny_llama(layers=2)
    in_trace = _Ops()
    seen = _LiveBytes.__torch_dispatch__

    def counted(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if operator_kind(func.namespace, name, func.is_view) == "computing":
            in_trace.computing[name] += 1
        return seen(self, func, types, args, kwargs)

    monkeypatch.setattr(_LiveBytes, "__torch_dispatch__", counted)
    traced = _trace_step(config, MicroStep(1, S, "fp32", attention)).operators
    assert traced.computing == sum(in_trace.computing.values()) > 0
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    model.train()
    ids = torch.randint(0, V, (1, S))
    mask = torch.ones_like(ids)
    mask[0, -1] = 0  # a padded batch, as the trace's mask stands for
    real = _Ops()
    with real:
        model(input_ids=ids, labels=ids, attention_mask=mask).loss.backward()
    differ = {
        name
        for name in real.computing | in_trace.computing
        if real.computing[name] != in_trace.computing[name]
    }
    assert differ <= DATA_DEPENDENT
    assert sum(abs(real.computing[n] - in_trace.computing[n]) for n in differ) <= 6
    assert traced.traffic_bytes == pytest.approx(real.traffic_bytes, rel=0.001)
    # Kept by the largest tensor's size: the loss's ops on the logits apart from the layers'.
    assert traced.traffic_by_numel[S * V] == pytest.approx(real.logits_bytes, rel=0.001)
    assert 0 < real.logits_bytes < real.traffic_bytes


def test_the_operators_of_every_layer_scale_as_the_whole_model_traces_them():
    step = MicroStep(1, S, "fp32", "eager")
    scaled = trace_micro_step(tiny_llama(layers=5), step).operators
    whole = _trace_step(tiny_llama(layers=5), step).operators
    assert (scaled.computing, scaled.traffic_bytes) == (whole.computing, whole.traffic_bytes)
    assert scaled.traffic_by_numel == pytest.approx(whole.traffic_by_numel)


@pytest.mark.parametrize(
    ("namespace", "name", "is_view", "kind"),
    [
        ("aten", "mm", False, "product"),
        ("aten", "t", True, "product"),
        ("aten", "_scaled_dot_product_flash_attention_for_cpu", False, "product"),
        ("aten", "view", True, "view"),
        ("aten", "_unsafe_view", False, "view"),
        ("aten", "add", False, "computing"),
        ("aten", "_softmax", False, "computing"),
        ("prim", "device", False, "other"),
    ],
)
def test_each_op_is_a_product_a_view_a_computing_op_or_not_atens(namespace, name, is_view, kind):
    assert operator_kind(namespace, name, is_view) == kind
    tally = OperatorTally().added(namespace, name, is_view, 100, 7)
    counted = {"computing": (1, 0, 100), "view": (0, 1, 0)}.get(kind, (0, 0, 0))
    assert (tally.computing, tally.views, tally.traffic_bytes) == counted
    assert tally.traffic_by_numel == ({7: 100} if kind == "computing" else {})
