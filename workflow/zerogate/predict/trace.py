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

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves
from transformers import AutoModelForCausalLM

from zerogate.config.model_data import ATTENTIONS
from zerogate.model.hf_config import ModelShape, shape_of
from zerogate.model.loss import set_loss
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import TORCH_DTYPES
from zerogate.predict.trace_layers import layer_type_period, layers_differ, with_layers
from zerogate.predict.trace_log import (
    ALLOC,
    END,
    FIRST_GRADIENT,
    FORWARD_END,
    FREE,
    OP,
    SAVED,
    StepFigures,
    TraceLog,
    at_micro_batch,
)
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
    key = (*_log_key(config, step), traced_layers)
    if key not in _TRACES:
        _TRACES[key] = _traced_micro_step(config, step, traced_layers)
    return _TRACES[key]


def forget_traces() -> None:
    """Drop every trace and recorded event this process keeps (a benchmark comparing ways of tracing)."""
    _TRACES.clear()
    _BASE_LOGS.clear()


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


def _extrapolated_size_classes(
    fewer: StepFigures, more: StepFigures, extra_layers: int
) -> dict[str, dict[str, int]]:
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


def _at_first_gradient(saved_bytes: int, step: StepFigures) -> int:
    """The bytes alive at the first accumulated gradient for a model saving ``saved_bytes``."""
    return max(0, saved_bytes + step.at_first_gradient_change)


def _cpu_kernel_note(step: StepFigures, attention: str) -> str:
    if attention == "sdpa" and step.math_attention:
        return (
            "; note: torch's CPU SDPA ran its math kernel here (attention dropout, for one), which saves the "
            "s x s attention probabilities; CUDA's fused kernels would not, so this overstates a GPU run"
        )
    return ""


# The micro-batches a larger one's events are read from: assumed, the two smallest above 1, since a batch
# dimension of one can spare a kernel a copy that every larger micro-batch makes (where the two saw different
# events there is no line and the micro-batch is traced). _BASE_LOGS keeps their events by the config's JSON,
# its attention implementation and the micro-step: a micro-batch search reads them again.
BASE_MICRO_BATCHES = (2, 3)
_BASE_LOGS: dict[tuple[str, str | None, MicroStep], TraceLog] = {}


@dataclass
class StepCounts:
    """The micro-steps this process has traced and those it has read off a line (:func:`_trace_step`)."""

    traced: int = 0
    on_the_line: int = 0


STEP_COUNTS = StepCounts()


def _trace_step(config: Any, step: MicroStep) -> StepFigures:
    """The figures of one micro-step of ``config`` (one fake forward with loss and one backward, each weight
    gradient dropped once accumulated). A micro-batch above the larger of BASE_MICRO_BATCHES, where the
    smaller one's trace is already at hand (a micro-batch search), is read off the line through those two
    micro-batches' events when they saw the same events (zerogate.predict.trace_log.at_micro_batch); every
    other micro-step is traced."""
    low, high = BASE_MICRO_BATCHES
    if step.micro_batch > high and _log_key(config, dataclasses.replace(step, micro_batch=low)) in _BASE_LOGS:
        one, other = (_base_log(config, dataclasses.replace(step, micro_batch=m)) for m in BASE_MICRO_BATCHES)
        line = at_micro_batch(one, other, step.micro_batch)
        if line is not None:
            STEP_COUNTS.on_the_line += 1
            return line.figures()
    if step.micro_batch in BASE_MICRO_BATCHES:
        return _base_log(config, step).figures()
    return record_step(config, step).figures()


def _log_key(config: Any, step: MicroStep) -> tuple[str, str | None, MicroStep]:
    """A micro-step of a config as the traces are kept: the config's JSON, its attention implementation."""
    return config.to_json_string(), getattr(config, "_attn_implementation", None), step


def _base_log(config: Any, step: MicroStep) -> TraceLog:
    key = _log_key(config, step)
    if key not in _BASE_LOGS:
        _BASE_LOGS[key] = record_step(config, step)
    return _BASE_LOGS[key]


def record_step(config: Any, step: MicroStep) -> TraceLog:
    """The events of one fake forward with loss and one backward of ``config``'s causal LM, each weight
    gradient dropped once accumulated (zerogate.predict.trace_log)."""
    with FakeTensorMode():
        model = AutoModelForCausalLM.from_config(
            config, dtype=getattr(torch, TORCH_DTYPES[step.dtype]), attn_implementation=step.attention
        )
        STEP_COUNTS.traced += 1
        model.train()  # dropout as in training
        set_loss(model, step.loss_in_fp32)
        model_state = {StorageWeakRef(t.untyped_storage()) for t in [*model.parameters(), *model.buffers()]}
        events: list[tuple] = []
        saved = _SavedTensors(model_state, events)
        if step.checkpointing:
            _checkpoint_counting_bound_tensors(model, saved)
        input_ids = torch.zeros(step.micro_batch, step.seq_len, dtype=torch.long)
        inputs = {"input_ids": input_ids, "labels": input_ids}
        if step.padding_mask:
            inputs["attention_mask"] = torch.ones_like(input_ids)
        live = _LiveBytes(model_state, events)
        first: list[bool] = []

        def drop_accumulated_gradient(parameter: Any) -> None:
            # ZeRO's gradient hooks take each gradient into a bucket once it is accumulated.
            if not first:
                first.append(True)
                events.append((FIRST_GRADIENT,))
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
            events.append((FORWARD_END,))
            loss.backward()
        events.append((END,))
        for hook in hooks:
            hook.remove()
        return TraceLog(step.micro_batch, tuple(events), live.saw_math_attention)


def _unpack(tensor: Any) -> Any:
    return tensor


class _SavedTensors:
    """A saved_tensors_hooks pack hook that counts each saved storage once, model state excluded."""

    def __init__(self, model_state: set, events: list[tuple]) -> None:
        self._model_state = model_state
        self._counted: set = set()
        self._events = events

    def pack(self, tensor: Any) -> Any:
        self.count(tensor)
        return tensor

    def count(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        if ref not in self._model_state and ref not in self._counted:
            self._counted.add(ref)
            self._events.append((SAVED, storage.nbytes()))


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
    """The runtime's live-tensor count (zerogate.runtime.live_tensors, also what the training ranks measure),
    model state excluded, writing down each storage it counts and frees and each op it sees
    (zerogate.predict.trace_log), and noting whether SDPA's math kernel ran."""

    def __init__(self, model_state: set, events: list[tuple]) -> None:
        super().__init__(excluded=model_state)
        self.saw_math_attention = False
        self._events = events
        self._numbers: dict = {}  # each counted storage's number in the events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is not NotImplemented:
            traffic, largest = operator_traffic(args, kwargs, out)
            self._events.append(
                (OP, func.namespace, func.overloadpacket.__name__, func.is_view, traffic, largest)
            )
        return out

    def count(self, ref: Any, nbytes: int) -> None:
        super().count(ref, nbytes)
        self._numbers[ref] = len(self._events)
        self._events.append((ALLOC, self._numbers[ref], nbytes))

    def uncount(self, ref: Any) -> None:
        super().uncount(ref)
        number = self._numbers.pop(ref, None)
        if number is not None:
            self._events.append((FREE, number))

    def saw(self, func: Any) -> None:
        # SDPA's math kernel is the composite that calls _safe_softmax; the fused kernels never do.
        self.saw_math_attention |= func is torch.ops.aten._safe_softmax.default
