"""Activations and backward transients of one micro-step, traced from the real architecture, not guessed.

The model of a transformers config is built under ``torch._subclasses.fake_tensor.FakeTensorMode`` on the
CPU: every tensor has its shape, dtype and storage but no memory, so a 14B model's layers cost nothing.
Fake CPU tensors, not fake CUDA ones: with the CPU wheel autograd fails in its CUDA device guard
(docs/reference.md section 1). One forward with loss runs on fake input ids and labels (and a padding mask
of ones, as the training loop passes one), then a backward.

Two quantities, in bytes:

* saved activations: what autograd keeps for backward, seen by a ``torch.autograd.graph.saved_tensors_hooks``
  pack hook, each storage once (a view saved by two ops is one tensor), parameters and buffers left out
  (they are model state, not activations). With non-reentrant activation checkpointing the checkpoint's
  positional inputs are saved through the same hooks (torch.utils.checkpoint _CheckpointFrame.save_inputs),
  so the per-layer figure becomes the layer's input; the keyword tensors transformers binds into each
  checkpointed call (rotary cos/sin, the attention mask, position ids) are kept without the hooks and are
  counted where the call is made. What this counts equals the bytes alive at the end of the forward.
* the backward, in two parts split at the moment the first weight gradient is accumulated (its
  post-accumulate-grad hook runs). Every weight gradient is computed and, once accumulated, dropped by that
  hook, as DeepSpeed's ZeRO-1/2/3 gradient hooks copy it into the reduction bucket and let it go
  (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads, stage3.py reduce_ready_partitions_and_
  remove_grads): so a gradient counts from its computation to its accumulation, a tied weight's two
  contributions until autograd sums them. The first part matters because ZeRO-1/2 allocate their reduction
  buckets at that first hook (stage_1_and_2.py process_gradients -> setup_buckets), when much of the
  forward's activations has gone.
  - backward transient: the peak of live bytes before the first weight gradient is accumulated, above the
    live bytes at the end of the forward (the logits' gradients in flight, the first weight gradients;
    with checkpointing also the layer being recomputed);
  - at the first gradient: the bytes alive when the first weight gradient is accumulated (the activations
    not yet released and what the backward holds then);
  - after the first gradient: the peak from then on above those bytes.
  Live bytes are counted by a TorchDispatchMode that sees every op's output storage and a finalizer on
  each storage that sees it die. torch's MemTracker (torch.distributed._tools.mem_tracker) also runs under
  FakeTensorMode on the CPU, but its peak is the whole step's peak, reached when every parameter gradient
  exists: the accumulated gradients are the ledger's terms (gradient partitions, reduce bucket), so here
  none of them stays.
* per window (the forward, the backward to its first accumulated gradient, the backward from it), the peak of
  live bytes in each of the C allocator's size classes (``heap``: storages of at most 32 MiB, whose pages
  glibc
  keeps resident once freed; ``mapped``: larger ones, unmapped when freed; zerogate.runtime.heap): what the
  CPU resident-set prediction needs (zerogate.predict.host_memory.retained_heap_bytes).

Dtypes as DeepSpeed's fp16/bf16 modes run them: the weights are 16-bit, and what the modelling code upcasts
stays fp32 (RMSNorm's hidden.to(float32) and its rsqrt, eager attention's softmax(dtype=float32), the loss's
logits.float() and log_softmax, unless the run's loss takes the logits in their dtype: zerogate.model.loss).
In fp32 these casts are no-ops that alias their input, so fp32 is twice fp16 only where no op upcasts.

The trace shows what torch's CPU kernels save. Where CUDA's kernels differ, it differs from a GPU run:
CPU dropout saves a noise tensor in the activation dtype where CUDA's saves a one-byte mask, and CPU SDPA
runs its math kernel (which saves the s x s probabilities) where CUDA's fused kernels would not, e.g. with
attention dropout (GPT-2). ``ActivationTrace.how`` says so when it happens.

Few layers, then scale: the same config with k and k+1 decoder layers is traced; per layer = the
difference, outside the layers (embeddings, rotary tables, final norm, logits, loss) = the rest. That is
exact only when every decoder layer of the full config is alike, which is checked on the full model built
on the meta device: the config's ``layer_types`` (if any) are one type, and every decoder layer (the
classes in ``_no_split_modules``) has the same class, attention type and parameter names and shapes. Where
the layer types repeat with a period p (Gemma-2's sliding/global alternation: p = 2) and each layer is
alike the one p before it, k and k+1 periods are traced and scaled by periods the same way
(zerogate.predict.trace_layers). Where they differ otherwise (dense-then-MoE stacks, types that do not
repeat), the whole model is traced instead and the result says so.

Tracing needs torch and transformers, so this module imports them: only what traces imports it (the
planner's zerogate.predict.activations, when a plan asks for traced activations), never the analysis side
or the Snakefile's DAG build.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves
from transformers import AutoModelForCausalLM

from zerogate.config.model_data import ATTENTIONS
from zerogate.model.hf_config import ModelShape, load_config, shape_of
from zerogate.model.loss import set_loss
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import TORCH_DTYPES
from zerogate.predict.trace_layers import layer_type_period, layers_differ, with_layers
from zerogate.runtime.live_tensors import live_bytes_class


@dataclass(frozen=True)
class MicroStep:
    """The micro-step a trace runs. ``dtype`` is fp32, fp16 or bf16 (weights and activations); ``attention``
    the model's attn_implementation; ``checkpointing`` non-reentrant activation checkpointing of every
    decoder layer. ``padding_mask``: pass an attention mask as the training loop does (transformers then
    builds a 4-D mask, and SDPA repeats the KV heads instead of using its native grouped-query path);
    without one SDPA saves the unrepeated keys and values. ``loss_in_fp32``: the loss as the run computes it
    (zerogate.model.loss: transformers' ForCausalLMLoss upcasts the logits, or the cross-entropy in their
    dtype)."""

    micro_batch: int
    seq_len: int
    dtype: str
    attention: str = "sdpa"
    checkpointing: bool = False
    padding_mask: bool = True
    loss_in_fp32: bool = True

    def described(self) -> str:
        """The settings in words, for ``ActivationTrace.how``."""
        return (
            f"{self.dtype}, {self.attention} attention, {'a' if self.padding_mask else 'no'} padding mask, "
            f"{'with' if self.checkpointing else 'no'} activation checkpointing, the loss "
            f"{'on fp32 logits' if self.loss_in_fp32 else 'in the logits dtype'}, micro-batch "
            f"{self.micro_batch}, sequence {self.seq_len}"
        )


@dataclass(frozen=True)
class ActivationTrace:
    """What one micro-step keeps for backward and what backward adds on top, bytes per rank."""

    # Saved by one decoder layer; None when the layers differ (whole model traced).
    per_layer_bytes: int | None
    outside_layers_bytes: int | None  # embeddings, rotary tables, final norm, logits and loss
    layers: int
    total_bytes: int  # per_layer * layers + outside, or the whole model's trace
    # Peak live bytes in backward above the forward's end, to the first gradient.
    backward_transient_bytes: int
    at_first_gradient_bytes: int  # alive when the first weight gradient is accumulated
    after_first_gradient_bytes: int  # the backward's peak after that, above those bytes
    how: str
    # Per window (the ledger's phases: forward, backward to the first gradient, backward from it), the peak of
    # live bytes in each of the C allocator's size classes (zerogate.runtime.live_tensors: heap, mapped).
    size_classes: dict[str, dict[str, int]]
    # The micro-step's operators beyond its products (forward, loss and backward, recomputation included):
    # zerogate.predict.operator_tally, scaled to every layer like the bytes.
    operators: OperatorTally = OperatorTally()


@dataclass(frozen=True)
class _Step:
    saved_bytes: int
    # Every storage created in the forward and still alive, model state excluded.
    live_bytes_at_forward_end: int
    transient_bytes: int  # the backward's peak above the forward's end, to the first accumulated gradient
    # Live bytes at the first accumulated gradient less those at the forward's end.
    at_first_gradient_change: int
    # The backward's peak after the first accumulated gradient, above its bytes.
    after_first_gradient_bytes: int
    math_attention: bool  # torch's SDPA math kernel ran (it saves the s x s attention probabilities)
    size_classes: dict[str, dict[str, int]]  # per window, each size class's peak of live bytes
    operators: OperatorTally  # every op of the forward with loss and the backward, beyond the products


_COUNTING = (
    "saved tensors counted once per storage, parameters and buffers excluded; backward transient "
    "= peak live bytes in backward above the forward's end until the first weight gradient is "
    "accumulated, each weight gradient dropped once accumulated"
)


def _checked_shape(config: Any, step: MicroStep, traced_layers: int) -> ModelShape:
    """``config``'s shape, once ``step`` and ``traced_layers`` are known to fit it."""
    if step.dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype '{step.dtype}' is not one of {', '.join(TORCH_DTYPES)}")
    if step.attention not in ATTENTIONS:
        raise ValueError(f"attention '{step.attention}' is not one of {', '.join(ATTENTIONS)}")
    if step.micro_batch < 1 or step.seq_len < 1 or traced_layers < 1:
        raise ValueError("micro_batch, seq_len and traced_layers must be positive")
    shape = shape_of(config)
    if step.seq_len > shape.max_positions:
        raise ValueError(f"seq_len {step.seq_len} exceeds the model's {shape.max_positions} positions")
    return shape


# The traces this process has run. A trace is a function of the config (its JSON and its attention
# implementation, as zerogate.predict.activations keys the plans' traces), the micro-step and the layers
# traced: fake tensors on the CPU, nothing of the machine. Plans, the published rows' harness and the
# suggestions ask for the same ones again.
_TRACES: dict[tuple[str, str | None, MicroStep, int], ActivationTrace] = {}


def trace_micro_step(config: Any, step: MicroStep, *, traced_layers: int = 1) -> ActivationTrace:
    """Trace one micro-step of ``config``'s causal LM; see the module docstring for what is counted.
    ``traced_layers``: k, the smaller of the two layer counts traced (the other is k + 1). Each distinct trace
    runs once in a process (``_TRACES``)."""
    key = (config.to_json_string(), getattr(config, "_attn_implementation", None), step, traced_layers)
    if key not in _TRACES:
        _TRACES[key] = _traced_micro_step(config, step, traced_layers)
    return _TRACES[key]


def _traced_micro_step(config: Any, step: MicroStep, traced_layers: int) -> ActivationTrace:
    shape = _checked_shape(config, step, traced_layers)
    period = layer_type_period(config, shape.layers)
    if period is None:
        types = ", ".join(sorted(set(config.layer_types)))
        return _whole_model_trace(config, step, shape.layers, f"its layer_types ({types}) do not repeat")
    unlike = layers_differ(config, shape.layers, period)
    if unlike is None and period > 1 and period * (traced_layers + 1) > shape.layers:
        unlike = f"its layer types repeat every {period} layers, too few to trace {traced_layers + 1} periods"
    if unlike is not None:
        return _whole_model_trace(config, step, shape.layers, unlike)
    return _scaled_trace(config, step, shape.layers, traced_layers, period)


def _whole_model_trace(config: Any, step: MicroStep, layers: int, unlike: str) -> ActivationTrace:
    """Every decoder layer traced, where they are not alike (``unlike`` says how)."""
    whole = _trace_step(config, step)
    how = (
        f"{config.model_type} model: {unlike}, so all {layers} decoder layers were traced "
        f"(not scaled) under FakeTensorMode on the CPU ({step.described()}); {_COUNTING}"
    )
    return ActivationTrace(
        None,
        None,
        layers,
        whole.saved_bytes,
        whole.transient_bytes,
        _at_first_gradient(whole.saved_bytes, whole),
        whole.after_first_gradient_bytes,
        how + _cpu_kernel_note(whole, step.attention),
        whole.size_classes,
        whole.operators,
    )


def _scaled_trace(
    config: Any, step: MicroStep, layers: int, traced_layers: int, period: int = 1
) -> ActivationTrace:
    """k and k + 1 alike periods of ``period`` decoder layers traced, scaled to ``layers``: per period = the
    difference, outside the layers = the rest (one period is one layer where every layer is alike)."""
    fewer = _trace_step(with_layers(config, period * traced_layers), step)
    more = _trace_step(with_layers(config, period * (traced_layers + 1)), step)
    per_period = more.saved_bytes - fewer.saved_bytes
    outside = fewer.saved_bytes - traced_layers * per_period
    periods = layers // period
    unit = "decoder layers" if period == 1 else f"periods of {period} decoder layers (its layer_types)"
    how = (
        f"{config.model_type} model traced with {traced_layers} and {traced_layers + 1} {unit} under "
        f"FakeTensorMode on the CPU ({step.described()}); all {layers} decoder layers of the config are "
        f"alike{'' if period == 1 else ' period by period'} (one class, attention type and parameter "
        f"shapes), so per {'layer' if period == 1 else 'period'} = the difference and outside the layers = "
        f"the rest; "
        f"{_COUNTING}"
    )
    total = per_period * periods + outside
    # What the backward frees before its first accumulated gradient is the top of the model's (the loss, the
    # head): the same for any layer count. The peak after it, as bytes alive, grows by a layer's activations
    # per layer while it falls early in the backward and not at all once it falls at the end (a tied weight's
    # gradients summed after every layer's activations are gone): linear in the layer count either way, so the
    # two traces extrapolate it.
    at_first = _at_first_gradient(total, more)
    peak_after = [
        traced.saved_bytes + traced.at_first_gradient_change + traced.after_first_gradient_bytes
        for traced in (fewer, more)
    ]
    peak_at_all_layers = peak_after[0] + (periods - traced_layers) * (peak_after[1] - peak_after[0])
    return ActivationTrace(
        per_period if period == 1 else None,  # a period's layers differ: no one layer's figure
        outside if period == 1 else None,
        layers,
        total,
        max(fewer.transient_bytes, more.transient_bytes),
        at_first,
        max(0, peak_at_all_layers - at_first),
        how + _cpu_kernel_note(more, step.attention),
        _extrapolated_size_classes(fewer, more, periods - traced_layers),
        fewer.operators.extrapolated(more.operators, periods - traced_layers),
    )


def _extrapolated_size_classes(fewer: _Step, more: _Step, extra_layers: int) -> dict[str, dict[str, int]]:
    """Each size class's peak in each window, alive bytes, extrapolated from the two traces by
    ``extra_layers`` more layers than the fewer has (linear in the layer count)."""
    return {
        window: {
            size_class: max(
                0,
                fewer.size_classes[window][size_class]
                + extra_layers * (peak - fewer.size_classes[window][size_class]),
            )
            for size_class, peak in peaks.items()
        }
        for window, peaks in more.size_classes.items()
    }


def _at_first_gradient(saved_bytes: int, step: _Step) -> int:
    """The bytes alive at the first accumulated gradient for a model saving ``saved_bytes``."""
    return max(0, saved_bytes + step.at_first_gradient_change)


def _cpu_kernel_note(step: _Step, attention: str) -> str:
    if attention == "sdpa" and step.math_attention:
        return (
            "; note: torch's CPU SDPA ran its math kernel here (attention dropout, for one), which saves the "
            "s x s attention probabilities; CUDA's fused kernels would not, so this overstates a GPU run"
        )
    return ""


def _trace_step(config: Any, step: MicroStep) -> _Step:
    """One fake forward with loss and one backward, each weight gradient dropped once accumulated."""
    with FakeTensorMode():
        model = AutoModelForCausalLM.from_config(
            config, dtype=getattr(torch, TORCH_DTYPES[step.dtype]), attn_implementation=step.attention
        )
        model.train()  # dropout as in training
        set_loss(model, step.loss_in_fp32)
        model_state = {StorageWeakRef(t.untyped_storage()) for t in [*model.parameters(), *model.buffers()]}
        saved = _SavedTensors(model_state)
        if step.checkpointing:
            _checkpoint_counting_bound_tensors(model, saved)
        input_ids = torch.zeros(step.micro_batch, step.seq_len, dtype=torch.long)
        inputs = {"input_ids": input_ids, "labels": input_ids}
        if step.padding_mask:
            inputs["attention_mask"] = torch.ones_like(input_ids)
        live = _LiveBytes(model_state)
        first: dict[str, int] = {}
        size_classes: dict[str, dict[str, int]] = {}

        def drop_accumulated_gradient(parameter: Any) -> None:
            # ZeRO's gradient hooks take each gradient into a bucket once it is accumulated.
            if not first:
                first["live"], first["peak"] = live.now, live.peak
                size_classes["backward"] = dict(live.class_peak)
                live.restart_peak()
            parameter.grad = None

        hooks = [
            p.register_post_accumulate_grad_hook(drop_accumulated_gradient)
            for p in model.parameters()
            if p.requires_grad
        ]
        with live:
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, _unpack):
                # Only the loss outlives the forward, as in the training loop (engine(**batch).loss).
                loss = model(**inputs).loss
            size_classes["forward"] = dict(live.class_peak)
            forward_end = live.restart_peak()
            loss.backward()
        for hook in hooks:
            hook.remove()
        if not first:  # no parameter takes a gradient: the whole backward is before the first
            first["live"], first["peak"] = live.now, live.peak
            size_classes["backward"] = dict(live.class_peak)
        size_classes["backward_from_first_gradient"] = dict(live.class_peak)
        return _Step(
            saved.bytes,
            forward_end,
            first["peak"] - forward_end,
            first["live"] - forward_end,
            live.peak - first["live"],
            live.saw_math_attention,
            size_classes,
            live.operators,
        )


def _unpack(tensor: Any) -> Any:
    return tensor


class _SavedTensors:
    """A saved_tensors_hooks pack hook that counts each saved storage once, model state excluded."""

    def __init__(self, model_state: set) -> None:
        self._model_state = model_state
        self._counted: set = set()
        self.bytes = 0

    def pack(self, tensor: Any) -> Any:
        self.count(tensor)
        return tensor

    def count(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        if ref not in self._model_state and ref not in self._counted:
            self._counted.add(ref)
            self.bytes += storage.nbytes()


def _counting_bound_tensors(checkpoint_function: Any, saved: _SavedTensors) -> Any:
    """``checkpoint_function`` that also counts the tensors bound into the checkpointed function.

    transformers checkpoints ``partial(layer.forward, **kwargs)``
    (modeling_layers.GradientCheckpointingLayer):
    the rotary cos/sin and the attention mask ride in the partial, which the checkpoint keeps for the
    recomputation without saving them through the saved-tensor hooks (only its positional inputs are).
    """

    def checkpoint_counting_bound_tensors(function: Any, *args: Any, **kwargs: Any) -> Any:
        for leaf in tree_leaves(dict(getattr(function, "keywords", None) or {})):
            if isinstance(leaf, torch.Tensor):
                saved.count(leaf)
        return checkpoint_function(function, *args, **kwargs)

    return checkpoint_counting_bound_tensors


def _checkpoint_counting_bound_tensors(model: Any, saved: _SavedTensors) -> None:
    """Non-reentrant activation checkpointing of every decoder layer of ``model``, each checkpoint also
    counting the tensors bound into its function (:func:`_counting_bound_tensors`)."""
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    for module in model.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            checkpoint_function = module._gradient_checkpointing_func
            module._gradient_checkpointing_func = _counting_bound_tensors(checkpoint_function, saved)


def operator_traffic(args: Any, kwargs: Any, out: Any) -> tuple[int, int]:
    """The bytes one dispatched op moves (zerogate.predict.operator_tally): its tensor inputs and outputs;
    and the elements of the largest of them."""
    tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors), max((t.numel() for t in tensors), default=0)


class _LiveBytes(live_bytes_class()):
    """Bytes of the storages alive now (model state excluded) and their peak, op by op: the runtime's
    live-tensor count (zerogate.runtime.live_tensors, also what the training ranks measure), which also
    notes whether SDPA's math kernel ran."""

    def __init__(self, model_state: set) -> None:
        super().__init__(excluded=model_state)
        self.saw_math_attention = False
        self.operators = OperatorTally()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is not NotImplemented:
            name = func.overloadpacket.__name__
            traffic, largest = operator_traffic(args, kwargs, out)
            self.operators = self.operators.added(func.namespace, name, func.is_view, traffic, largest)
        return out

    def saw(self, func: Any) -> None:
        # SDPA's math kernel is the composite that calls _safe_softmax; the fused kernels never do.
        self.saw_math_attention |= func is torch.ops.aten._safe_softmax.default


def main(argv: list[str] | None = None) -> None:
    """Print the trace of a config.json for both attentions, with and without checkpointing, and the wall
    time of each (a benchmark to read, not a test):

        python -m zerogate.predict.trace config/models/qwen2.5-14b.json --seq-len 512 --micro-batch 1 --dtype
        fp16
    """
    parser = argparse.ArgumentParser(
        prog="python -m zerogate.predict.trace", description=main.__doc__.split("\n\n")[0]
    )
    parser.add_argument("config", help="a config.json or a directory holding one")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), default="fp16")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    mib = 2**20
    for attention in ATTENTIONS:
        for checkpointing in (False, True):
            start = time.perf_counter()
            step = MicroStep(args.micro_batch, args.seq_len, args.dtype, attention, checkpointing)
            trace = trace_micro_step(config, step)
            seconds = time.perf_counter() - start
            per_layer = "n/a" if trace.per_layer_bytes is None else f"{trace.per_layer_bytes / mib:.1f}"
            outside = (
                "n/a" if trace.outside_layers_bytes is None else f"{trace.outside_layers_bytes / mib:.1f}"
            )
            print(
                f"{attention:5s} checkpointing={'on ' if checkpointing else 'off'} per layer {per_layer} "
                "MiB, "
                f"outside {outside} MiB, {trace.layers} layers, total {trace.total_bytes / mib:.1f} MiB, "
                f"backward transient {trace.backward_transient_bytes / mib:.1f} MiB, at the first gradient "
                f"{trace.at_first_gradient_bytes / mib:.1f} MiB + "
                f"{trace.after_first_gradient_bytes / mib:.1f} MiB "
                f"({seconds:.2f} s)"
            )
    print(trace.how)


if __name__ == "__main__":
    main()
