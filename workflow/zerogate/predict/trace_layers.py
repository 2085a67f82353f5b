"""Which decoder layers of a config are alike, for the activation trace's few-layers-then-scale method
(zerogate.predict.trace): the period of the config's ``layer_types`` (1 where every layer is of one type,
2 for Gemma-2's sliding/global alternation, None where the types do not repeat), a copy of the config with
fewer layers of the same pattern, and whether the decoder layers built on the meta device are alike (class,
attention type and parameter shapes) position by position within that period."""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM


def layer_count_key(config: Any) -> str:
    """The config's own key for the decoder-layer count (GPT-2: n_layer)."""
    return type(config).attribute_map.get("num_hidden_layers", "num_hidden_layers")


def _layer_types(config: Any) -> list[str] | None:
    """Each decoder layer's attention type: ``layer_types`` (Gemma-2, Qwen3...), or GPT-Neo's
    ``attention_layers`` (global and local alternating, expanded from ``attention_types`` by
    transformers' GPTNeoConfig)."""
    return getattr(config, "layer_types", None) or getattr(config, "attention_layers", None)


def layer_type_period(config: Any, layers: int) -> int | None:
    """The smallest p dividing ``layers`` with the layer types (:func:`_layer_types`) the first p types
    repeated at least twice (1 without them or with one type); None where the types do not repeat so."""
    layer_types = _layer_types(config)
    if not layer_types:
        return 1
    types = list(layer_types)
    if len(set(types)) == 1:
        return 1
    for period in range(1, layers // 2 + 1):
        if layers % period == 0 and types == types[:period] * (layers // period):
            return period
    return None


def with_layers(config: Any, layers: int) -> Any:
    """A copy of ``config`` with ``layers`` decoder layers, its ``layer_types`` (if any) the first ``layers``
    of the original's (a whole number of periods where the caller scales by periods; transformers checks
    len(layer_types) == num_hidden_layers)."""
    data = config.to_dict()
    data[layer_count_key(config)] = layers
    if isinstance(data.get("layer_types"), list) and data["layer_types"]:
        data["layer_types"] = data["layer_types"][:layers]
    if isinstance(data.get("attention_layers"), list) and data["attention_layers"]:
        # GPT-Neo rebuilds attention_layers from attention_types ([[pattern, repeats]]) and checks its length.
        kept = data["attention_layers"][:layers]
        period = layer_type_period(config, len(data["attention_layers"])) or layers
        data["attention_layers"] = kept
        data["attention_types"] = [[kept[:period], layers // period]] if layers % period == 0 else [[kept, 1]]
    return type(config).from_dict(data)


_LAYERS_DIFFER: dict[tuple[str, str, int], str | None] = {}


def layers_differ(config: Any, layers: int, period: int) -> str | None:
    """:func:`why_layers_differ`, once per config (it builds the whole model on the meta device)."""
    key = (type(config).__name__, config.to_json_string(use_diff=False), period)
    if key not in _LAYERS_DIFFER:
        _LAYERS_DIFFER[key] = why_layers_differ(config, layers, period)
    return _LAYERS_DIFFER[key]


def why_layers_differ(config: Any, layers: int, period: int) -> str | None:
    """None when every decoder layer of ``config`` is alike the layer ``period`` before it (class, attention
    type, parameter names and shapes), else why not."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [module for module in model.modules() if type(module).__name__ in block_classes]
    if len(blocks) != layers:
        return f"{len(blocks)} decoder-layer modules ({', '.join(sorted(block_classes))}) for {layers} layers"
    signatures = [
        (
            type(block).__name__,
            getattr(block, "attention_type", None),
            tuple((name, tuple(p.shape)) for name, p in block.named_parameters()),
        )
        for block in blocks
    ]
    if any(signatures[index] != signatures[index % period] for index in range(layers)):
        return "its decoder layers differ in class, attention type or parameter shapes"
    return None
