"""The ledger's activation terms traced from the run's architecture (zerogate.predict.trace), for any setup.

The planner asks for the activations of many setups (every scheme, every change it considers, every
micro-batch of the search for the largest that fits); each distinct (micro-batch, sequence length, dtype,
attention, checkpointing, the loss's precision) is traced once and kept. A trace builds one and two decoder
layers under FakeTensorMode on the CPU and scales by the layer count where the config's layers are alike (the
trace
checks that on the full model built on the meta device, and traces every layer where they differ), so one
costs about 0.2 s after the first (docs/planning.md). What the figures are, and the formula for hand-made
counts, is zerogate.predict.activation_figures'.
"""

from __future__ import annotations

from typing import Any

from zerogate.predict.activation_figures import ActivationFigures
from zerogate.predict.setup import Setup
from zerogate.predict.trace import MicroStep, trace_micro_step

# The config keys transformers' architectures name their attention-probability dropout by.
ATTENTION_DROPOUT_KEYS = ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob")


def as_cuda_sdpa_runs(config: Any) -> tuple[Any, str]:
    """``config`` as the trace should see it for a CUDA run with SDPA attention, and what changed.

    With attention dropout torch's CPU SDPA falls back to its math kernel, which saves the s x s attention
    probabilities; CUDA's fused kernels (flash, memory-efficient) keep the RNG state and regenerate the
    dropout mask in the backward, so they save what they save without dropout. The trace of a CUDA target
    therefore runs the attention without dropout; other dropouts are unchanged (the CPU saves a noise tensor
    in the activation dtype where CUDA saves a one-byte mask, so those stay an overstatement)."""
    dropped = {key: getattr(config, key) for key in ATTENTION_DROPOUT_KEYS if getattr(config, key, 0)}
    if not dropped:
        return config, ""
    changed = type(config).from_dict({**config.to_dict(), **{key: 0.0 for key in dropped}})
    changed._attn_implementation = config._attn_implementation
    return changed, (
        f"; attention dropout ({', '.join(f'{k} {v}' for k, v in dropped.items())}) traced as 0 for "
        f"this CUDA target: CUDA's fused SDPA kernels regenerate the dropout mask from the RNG state "
        f"instead of saving the s x s probabilities that the CPU's math kernel saves"
    )


class TracedActivations:
    """``activations(setup)``: the traced terms of ``config``'s causal LM for ``setup``
    (zerogate.predict.activation_figures.Activations), cached per distinct setting."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._traced: dict[tuple, ActivationFigures] = {}

    def __call__(self, setup: Setup) -> ActivationFigures:
        key = (
            setup.micro_batch,
            setup.seq_len,
            setup.dtype,
            setup.attention,
            setup.activation_checkpointing,
            setup.loss_in_fp32,
            setup.device_kind,
        )
        if key not in self._traced:
            config, changed = self.config, ""
            if setup.device_kind == "cuda" and setup.attention == "sdpa":
                config, changed = as_cuda_sdpa_runs(self.config)
            step = MicroStep(
                micro_batch=setup.micro_batch,
                seq_len=setup.seq_len,
                dtype=setup.dtype,
                attention=setup.attention,
                checkpointing=setup.activation_checkpointing,
                loss_in_fp32=setup.loss_in_fp32,
            )
            trace = trace_micro_step(config, step)
            self._traced[key] = ActivationFigures(
                saved_bytes=trace.total_bytes,
                backward_transient_bytes=trace.backward_transient_bytes,
                basis="traced",
                how=trace.how + changed,
                per_layer_bytes=trace.per_layer_bytes,
                outside_layers_bytes=trace.outside_layers_bytes,
                layers=trace.layers,
                at_first_gradient_bytes=trace.at_first_gradient_bytes,
                after_first_gradient_bytes=trace.after_first_gradient_bytes,
                size_classes=trace.size_classes,
                operators=trace.operators,
            )
        return self._traced[key]

    @property
    def traces(self) -> int:
        """Distinct settings traced so far."""
        return len(self._traced)
