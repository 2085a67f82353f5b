"""A model's parameter counts (zerogate.contracts.model.ModelCounts), with the shape numbers the ledger and
the communication theory need: counted on the meta device (no weights), so a 14B model is counted in
seconds."""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM

from zerogate.contracts.model import ModelCounts


def input_embedding(config: Any) -> tuple[int, int, bool]:
    """``config``'s input embedding as zerogate.hardware.product_parameters takes it: its text model's
    vocabulary and hidden size, and whether the output head shares it."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return text.vocab_size, text.hidden_size, bool(getattr(config, "tie_word_embeddings", False))


# The counts this process has made, by the config's JSON: the planner counts the same model for every scheme,
# row and change it plans.
_COUNTED: dict[str, ModelCounts] = {}


def count_parameters(config: Any) -> ModelCounts:
    """Instantiate ``config``'s causal LM on the meta device and count its parameters (once a config in a
    process: ``_COUNTED``).

    DeepSpeed's ``model_to_params`` deduplicates tied weights by ``data_ptr``, which is 0 for every meta
    tensor; parameters are deduplicated by identity here instead (``Module.parameters`` does that).
    """
    key = config.to_json_string()
    if key not in _COUNTED:
        _COUNTED[key] = _counted(config)
    return _COUNTED[key]


def _counted(config: Any) -> ModelCounts:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = list(model.parameters())
    numels = tuple(p.numel() for p in parameters)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    block_modules = [m for m in model.modules() if type(m).__name__ in block_classes]
    largest_block = max((sum(p.numel() for p in m.parameters()) for m in block_modules), default=0)
    block_of = {id(p): index for index, m in enumerate(block_modules) for p in m.parameters()}
    inside = sum(sum(1 for _ in m.modules()) - 1 for m in block_modules)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab, _, tied = input_embedding(config)
    return ModelCounts(
        total=sum(numels),
        largest_layer=largest,
        numels=numels,
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        heads=text.num_attention_heads,
        vocab=vocab,
        tied_embeddings=tied,
        largest_block=largest_block,
        first_dims=tuple(p.shape[0] if p.dim() else 1 for p in parameters),
        blocks=tuple(block_of.get(id(p), -1) for p in parameters),
        modules=sum(1 for _ in model.modules()),
        modules_in_blocks=inside,
    )
