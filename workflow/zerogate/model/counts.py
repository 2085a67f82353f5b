"""A model's parameter counts, with the shape numbers the ledger and the communication theory need:
counted on the meta device (no weights), so a 14B model is counted in seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelCounts:
    """Parameter counts of a model, with the shape numbers the activation terms need."""

    total: int  # unique parameters (tied weights once)
    largest_layer: int  # most parameters held directly by one module (DeepSpeed's "largest layer")
    numels: tuple[int, ...]  # each unique parameter's element count (ZeRO-3 partitions each one)
    hidden: int
    layers: int
    heads: int
    vocab: int
    tied_embeddings: bool
    # Most parameters in one decoder layer (a class in the model's ``_no_split_modules``): what ZeRO-3
    # gathers at once when that class is a leaf module (zero_optimization.leaf_module, zerogate.plan.cpu_tuning).
    largest_block: int = 0

    def partition_numel(self, ranks: int) -> int:
        """Elements of one rank's ZeRO-3 partition: each parameter is padded to a multiple of ``ranks``."""
        return sum(math.ceil(n / ranks) for n in self.numels)

    def persistent_numel(self, threshold: int) -> int:
        """Elements ZeRO-3 keeps whole on every rank (parameters at or below the persistence threshold)."""
        return sum(n for n in self.numels if n <= threshold)


def count_parameters(config: Any) -> ModelCounts:
    """Instantiate ``config``'s causal LM on the meta device and count its parameters.

    DeepSpeed's ``model_to_params`` deduplicates tied weights by ``data_ptr``, which is 0 for every meta
    tensor; parameters are deduplicated by identity here instead (``Module.parameters`` does that).
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    numels = tuple(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    largest_block = max((sum(p.numel() for p in m.parameters()) for m in model.modules()
                         if type(m).__name__ in blocks), default=0)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelCounts(
        total=sum(numels),
        largest_layer=largest,
        numels=numels,
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        heads=text.num_attention_heads,
        vocab=text.vocab_size,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        largest_block=largest_block,
    )
