"""Reject unknown or misspelt DeepSpeed config keys, at any depth, against DeepSpeed's own config classes.

DeepSpeed reads top-level keys one by one with defaults, so a misspelt top-level key is silently ignored;
the pydantic sections (``zero_optimization``, ``fp16``, ...) forbid extra fields, but only once the engine
is built on the GPU box. This check runs at render time on any machine. Where DeepSpeed has a pydantic
class for a section, its fields and aliases are the truth (recursively, through nested classes such as
``offload_param``). Top-level names come from the string constants of DeepSpeed's own constants modules.
Free-form sections (``optimizer.params``, ``scheduler.params``: the optimizer's constructor arguments)
are not checked below their own level.
"""

from __future__ import annotations

import difflib
import importlib
import types
import typing
from functools import lru_cache
from typing import Any

# Sections that DeepSpeed parses with a pydantic model: (module, class).
_SECTIONS = {
    "zero_optimization": ("deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    "fp16": ("deepspeed.runtime.precision_config", "DeepSpeedFP16Config"),
    "bf16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "bfloat16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "comms_logger": ("deepspeed.comm.config", "CommsLoggerConfig"),
    "tensorboard": ("deepspeed.monitor.config", "TensorBoardConfig"),
    "wandb": ("deepspeed.monitor.config", "WandbConfig"),
    "csv_monitor": ("deepspeed.monitor.config", "CSVConfig"),
    "comet": ("deepspeed.monitor.config", "CometConfig"),
    "compile": ("deepspeed.compile.config", "CompileConfig"),
    "hybrid_engine": ("deepspeed.runtime.config", "HybridEngineConfig"),
}
# Sections whose own keys DeepSpeed reads by name, but whose "params" are constructor arguments.
_TYPED_SECTIONS = {"optimizer": {"type", "params", "legacy_fusion"}, "scheduler": {"type", "params"}}
# Modules whose string constants name DeepSpeed's config keys.
_CONSTANT_MODULES = (
    "deepspeed.runtime.constants",
    "deepspeed.profiling.constants",
    "deepspeed.comm.constants",
    "deepspeed.runtime.swap_tensor.constants",
    "deepspeed.runtime.data_pipeline.constants",
    "deepspeed.runtime.model_checkpointing.constants",
    "deepspeed.compile.constants",
    "deepspeed.autotuning.constants",
    "deepspeed.runtime.activation_checkpointing.config",
    "deepspeed.compression.constants",
    "deepspeed.nebula.constants",
    "deepspeed.elasticity.constants",
    "deepspeed.runtime.tensor_parallel.config",
)


def _model(section: str) -> Any:
    module, name = _SECTIONS[section]
    return getattr(importlib.import_module(module), name)


@lru_cache(maxsize=None)
def top_level_keys() -> frozenset[str]:
    names: set[str] = set(_SECTIONS) | set(_TYPED_SECTIONS)
    for module_name in _CONSTANT_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        names |= {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and v.isidentifier()}
    return frozenset(names)


def _nested_model(annotation: Any) -> Any:
    """The DeepSpeed config class inside an annotation such as ``Optional[DeepSpeedZeroOffloadParamConfig]``."""
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    if isinstance(annotation, type) and issubclass(annotation, DeepSpeedConfigModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def model_keys(model: Any) -> dict[str, Any]:
    """Accepted keys of a pydantic config class (field names and aliases) -> nested class or None."""
    keys: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        nested = _nested_model(field.annotation)
        keys[name] = nested
        if field.alias:
            keys[field.alias] = nested
    return keys


def _suggest(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_model(node: dict[str, Any], model: Any, prefix: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    keys = model_keys(model)
    for key, value in node.items():
        path = f"{prefix}.{key}"
        if key not in keys:
            problems.append((path, f"unknown key (not a field of DeepSpeed's {model.__name__}){_suggest(key, keys)}"))
        elif keys[key] is not None and isinstance(value, dict):
            problems += _check_model(value, keys[key], path)
    return problems


def unknown_keys(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted path, problem) for every key DeepSpeed would not read, in config order."""
    problems: list[tuple[str, str]] = []
    known = top_level_keys()
    for key, value in config.items():
        if key in _SECTIONS:
            if isinstance(value, dict):
                problems += _check_model(value, _model(key), key)
        elif key in _TYPED_SECTIONS:
            if isinstance(value, dict):
                allowed = _TYPED_SECTIONS[key]
                problems += [(f"{key}.{k}", f"unknown key (DeepSpeed reads only {', '.join(sorted(allowed))})"
                              f"{_suggest(k, allowed)}") for k in value if k not in allowed]
        elif key not in known:
            problems.append((key, f"unknown top-level key (DeepSpeed would silently ignore it){_suggest(key, known)}"))
    return problems
