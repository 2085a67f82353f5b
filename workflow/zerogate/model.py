"""Build the profile's causal LM from its shape numbers (random initialisation)."""

from __future__ import annotations

from typing import Any

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel


def model_config(shape: dict[str, Any], vocab_size: int, seq_len: int, eos_id: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape["hidden_size"],
        intermediate_size=shape["intermediate_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape.get("num_key_value_heads", shape["num_attention_heads"]),
        max_position_embeddings=seq_len,
        # No padding_idx on the embedding: under zero.Init the weight is already partitioned when
        # transformers zeroes the padding row (IndexError). Padding is masked from loss and attention.
        pad_token_id=None,
        eos_token_id=eos_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )


def build_model(config: LlamaConfig) -> PreTrainedModel:
    # Eager attention: identical results on every backend, and the tiny default gains nothing from SDPA.
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config)
