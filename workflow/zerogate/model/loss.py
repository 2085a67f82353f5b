"""The training loss: transformers' causal-LM cross-entropy, on the logits upcast to fp32 (its default) or
on the logits in the training dtype, as a hand-written ``nn.CrossEntropyLoss`` on the model's output takes
them. One definition for the run (zerogate.model.build) and for the planner's trace (zerogate.predict.trace):
the upcast holds an fp32 copy of the logits and the cross-entropy's fp32 intermediates, which at a large
vocabulary and micro-batch are a large part of a micro-step's memory."""

from __future__ import annotations

from typing import Any

import torch
from transformers.loss.loss_utils import fixed_cross_entropy


def causal_lm_loss_in_logits_dtype(
    logits: Any,
    labels: Any,
    vocab_size: int,
    num_items_in_batch: Any = None,
    ignore_index: int = -100,
    shift_labels: Any = None,
    **kwargs: Any,
) -> Any:
    """transformers.loss.loss_utils.ForCausalLMLoss without its ``logits.float()``: the same label shift,
    ignore index and reduction, the cross-entropy computed in the logits' dtype."""
    if shift_labels is None:
        # Shift so that tokens < n predict n, as ForCausalLMLoss does.
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:].contiguous()
    return fixed_cross_entropy(
        logits.view(-1, vocab_size),
        shift_labels.view(-1).to(logits.device),
        num_items_in_batch,
        ignore_index,
        **kwargs,
    )


def set_loss(model: Any, loss_in_fp32: bool) -> None:
    """Give ``model`` (a transformers causal LM) the run's loss: its own default (ForCausalLMLoss, fp32)
    or the cross-entropy in the logits' dtype (PreTrainedModel.loss_function's setter)."""
    if not loss_in_fp32:
        model.loss_function = causal_lm_loss_in_logits_dtype
