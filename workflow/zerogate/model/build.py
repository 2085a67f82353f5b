"""The profile's causal LM: random initialisation from shape numbers, or pretrained weights.

``prepare_model`` (the rule, zerogate.model.prepare) turns any source into ``model.json`` plus, for
pretrained sources, a local Hugging Face directory. ``load_for_training`` builds the model on every rank under
ZeRO-3 through transformers' own ZeRO-3 path, an ``HfDeepSpeedConfig`` alive: a random model is built
under ``deepspeed.zero.Init`` and then initialised as the architecture defines it (each module's
parameters gathered for its ``_init_weights``); pretrained weights are loaded by ``from_pretrained``
shard by shard into the partitions (tied embeddings stay tied).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedModel, Qwen2Config
from transformers.initialization import no_init_weights
from transformers.integrations import HfDeepSpeedConfig
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

from zerogate.config.model_data import ModelSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.run import RunSpec
from zerogate.model.hf_config import config_file, load_config
from zerogate.model.loss import set_loss

# transformers keeps only a weak reference to the HfDeepSpeedConfig: this keeps it alive for the run.
_HF_DEEPSPEED_CONFIG: Any = None


def planned_model_config(
    shape: ModelSettings, vocab_size: int, seq_len: int, eos_id: int | None = None
) -> Any:
    """THE model of a profile's ``model``: its ``config`` (a Hugging Face config.json, any architecture, its
    own vocabulary and positions), else its shape keys: ``llama`` (default) or ``qwen2`` (q/k/v biases,
    Qwen2.5's shape), with the vocabulary ``vocab_size`` (the run spec's: model.vocab_size, else
    dataset.vocab_size) and positions for ``seq_len``. The planner, the ledger check and training all build
    or count this one (prepare_dataset refuses a tokenizer larger than its vocabulary), so every consumer
    counts the same parameters. The attention implementation is ``shape.attention`` (transformers'
    ``attn_implementation``: sdpa unless the profile says eager)."""
    if shape.config is not None:
        config = load_config(config_file(shape.config))
        if eos_id is not None:  # the run's tokenizer's end of sequence (generation stops there)
            config.eos_token_id = eos_id
    else:
        family = {"llama": LlamaConfig, "qwen2": Qwen2Config}[shape.architecture or "llama"]
        config = family(
            vocab_size=vocab_size,
            hidden_size=shape.hidden_size,
            intermediate_size=shape.intermediate_size,
            num_hidden_layers=shape.num_hidden_layers,
            num_attention_heads=shape.num_attention_heads,
            num_key_value_heads=shape.num_key_value_heads or shape.num_attention_heads,
            max_position_embeddings=seq_len,
            # No padding_idx on the embedding: under zero.Init the weight is already partitioned when
            # transformers zeroes the padding row (IndexError). Padding is masked from loss and attention.
            pad_token_id=None,
            eos_token_id=eos_id,
            bos_token_id=None,
            tie_word_embeddings=bool(shape.tie_word_embeddings),
        )
    config._attn_implementation = shape.attention
    return config


def zero3_for_transformers(ds_config: dict[str, Any] | None) -> bool:
    """Whether ``ds_config`` asks for ZeRO-3; tells transformers so (an ``HfDeepSpeedConfig`` kept alive,
    which its ZeRO-3 code paths look for: building, loading, generating) or that it does not (an earlier
    build's config in the same process must not partition this one)."""
    global _HF_DEEPSPEED_CONFIG
    zero3 = ((ds_config or {}).get("zero_optimization") or {}).get("stage") == 3
    _HF_DEEPSPEED_CONFIG = HfDeepSpeedConfig(ds_config) if zero3 else None
    if not zero3:
        unset_hf_deepspeed_config()
    return zero3


def build_model(config: Any, ds_config: dict[str, Any] | None = None) -> PreTrainedModel:
    """The causal LM of ``config`` with the config's attention implementation (planned_model_config sets the
    profile's), randomly initialised as the architecture defines it (its ``_init_weights``: Llama's normal
    of std ``initializer_range``, say), partitioned at once when ``ds_config`` asks for ZeRO-3.

    One seed draws the same weights either way, so every engine (whole-built DDP, ZeRO-0..2, FSDP2, and
    ZeRO-3) starts from the same model: under ZeRO-3 transformers skips torch's own initialisers while
    the modules are built (the parameters are partitioned as each module is made, so an ``_init_weights``
    after it would fill empty shards and leave torch's default draws, an embedding of std 1) and then
    initialises each module with its parameters gathered, on rank 0, in the module order of
    ``initialize_weights``. A whole model is built the same way: torch's initialisers skipped, then
    ``init_weights``, so no draw is spent on values that are overwritten."""
    attention = config._attn_implementation or "sdpa"
    if zero3_for_transformers(ds_config):
        return AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    model.init_weights()
    return model


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Recompute every decoder layer in the backward: transformers' gradient checkpointing with torch's
    non-reentrant checkpoint, which works under ZeRO-3 (its recomputation runs the layer's module hooks
    again, so DeepSpeed gathers the layer's parameters for it; the reentrant one would need the inputs to
    require gradients)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def load_for_training(spec: RunSpec, manifest: DatasetManifest, ds_config: dict[str, Any]) -> PreTrainedModel:
    """The model on this rank, partitioned by ZeRO-3 when the config asks for stage 3: the manifest's
    model (prepare_model's), pretrained or built from the run spec's shape."""
    model_info = manifest.model
    if not model_info.pretrained:
        # The profile's model (the run spec's vocabulary), not the tokenizer's: one model for every count.
        config = planned_model_config(spec.model, spec.vocab_size, spec.seq_len, manifest.eos_token_id)
        model = build_model(config, ds_config)
    else:
        zero3_for_transformers(ds_config)
        # fp32 master copy on load; DeepSpeed casts to the config's fp16/bf16 itself.
        model = AutoModelForCausalLM.from_pretrained(
            model_info.directory, dtype=torch.float32, attn_implementation=spec.model.attention
        )
    apply_training_features(model, spec.training)
    return model


def apply_training_features(model: PreTrainedModel, training: RunTraining) -> None:
    """The run's training settings that change the model itself: activation
    checkpointing and the loss's precision (zerogate.model.loss)."""
    if training.activation_checkpointing:
        enable_activation_checkpointing(model)
    set_loss(model, training.loss_in_fp32)
