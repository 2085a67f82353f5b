"""Make a profile's model source loadable offline (rule prepare_model): ``model.json`` for every source,
plus a local Hugging Face directory for pretrained ones: a GGUF is dequantised once here, so the training
ranks load safetensors instead of each dequantising the GGUF; a hub id resolves to the local cache. A
pretrained model's config must agree with every shape key the profile states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from zerogate.config.model_data import ModelSettings
from zerogate.contracts.data import ModelInfo
from zerogate.errors import InputError
from zerogate.model.sources import SHAPE, ModelSource, resolve_hub

# Shape keys a profile may state for a pretrained model (the planner counts parameters from them without
# the weights): each one stated must agree with the model's own config.
CHECKED_SHAPE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
)


def shape_disagreements(stated: ModelSettings, config: Any) -> list[str]:
    """``key: stated but the model has actual`` for each stated shape key the model's config contradicts."""
    problems = []
    for key in CHECKED_SHAPE_KEYS:
        value = getattr(stated, key)
        if value is not None and getattr(config, key, value) != value:
            problems.append(f"{key} {value} but the model has {getattr(config, key)}")
    return problems


def materialise(
    source: ModelSource, out_dir: str | Path, profile_file: str, stated_shape: ModelSettings
) -> ModelInfo:
    """Make ``source`` loadable offline from ``out_dir``; return (and write) ``model.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"source": source.spec, "kind": source.kind}
    if source.kind == SHAPE:
        info["directory"] = None
        if (
            stated_shape.vocab_size is not None
        ):  # a fixed vocabulary: prepare_dataset checks its tokenizer against it
            info["vocab_size"] = stated_shape.vocab_size
    else:
        if source.kind == "gguf":
            info["directory"] = str(convert_gguf(source.location, out / "hf"))
        elif source.kind == "hub":
            info["directory"] = resolve_hub(source.location, profile_file)
        else:
            info["directory"] = source.location
        config = AutoConfig.from_pretrained(info["directory"])
        problems = shape_disagreements(stated_shape, config)
        if problems:
            key = problems[0].split()[0]
            raise InputError(profile_file, f"model.{key}", f"{'; '.join(problems)} ({source.spec})")
        info.update(
            model_type=config.model_type,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            vocab_size=config.vocab_size,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )
    model = ModelInfo.of(info, str(out / "model.json"))
    model.write(out / "model.json")
    return model


def convert_gguf(gguf_file: str | Path, out_dir: Path) -> Path:
    """Dequantise a GGUF to fp32 and save it (weights and tokenizer) as a Hugging Face directory."""
    gguf_file = Path(gguf_file)
    kwargs = {"gguf_file": gguf_file.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_file.parent, dtype=torch.float32, **kwargs)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it, although its weights
    # are already plain fp32: copy them into an unquantized model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
