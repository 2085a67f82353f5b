"""Reject unknown or misspelt DeepSpeed config keys, at any depth, against DeepSpeed's own config classes.

DeepSpeed reads top-level keys one by one with defaults, so a misspelt top-level key is silently ignored;
the pydantic sections (``zero_optimization``, ``fp16``, ...) forbid extra fields, but only once the engine
is built on the GPU box. This check runs at render time on any machine. Where DeepSpeed has a pydantic
class for a section, its fields and aliases are the truth (recursively, through nested classes such as
``offload_param``). Top-level names come from the string constants of DeepSpeed's own constants modules.
Free-form sections (``optimizer.params``, ``scheduler.params``: the optimizer's constructor arguments)
are not checked below their own level.

What the classes accept is read once per DeepSpeed installation into a key table (:func:`key_table`) and kept
beside the environment (``<sys.prefix>/zerogate-cache``, :func:`kept_table`, where
zerogate.render.deepspeed_defaults keeps DeepSpeed's defaults the same way), named after DeepSpeed's version
and its installed files' record: every Snakemake invocation checks the claim's keys while it builds the DAG,
and importing DeepSpeed (and torch) for that took most of a DAG's build. Another installation, or another
table layout here, is another file; where the directory cannot be written, the table is read from DeepSpeed
each time.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import os
import sys
import types
import typing
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
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


def _top_level_from_deepspeed() -> list[str]:
    names: set[str] = set(_SECTIONS) | set(_TYPED_SECTIONS)
    for module_name in _CONSTANT_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        names |= {
            v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and v.isidentifier()
        }
    return sorted(names)


def _nested_model(annotation: Any) -> Any:
    """The DeepSpeed config class inside an annotation such as
    ``Optional[DeepSpeedZeroOffloadParamConfig]``."""
    # Read only when the key table is made from DeepSpeed: the Snakefile imports this module to check a
    # claim's keys against the kept table, without loading DeepSpeed (and torch).
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


def table_from_deepspeed() -> dict[str, Any]:
    """The key table read from DeepSpeed's classes and constants: ``top_level`` (names), ``sections`` (section
    -> class) and ``classes`` (class, as module.qualname -> {accepted key -> nested class or None})."""
    classes: dict[str, dict[str, str | None]] = {}

    def add(model: Any) -> str:
        name = f"{model.__module__}.{model.__qualname__}"
        if name not in classes:
            classes[name] = {}  # before its fields: a class nested in itself is added once
            classes[name] = {
                key: None if nested is None else add(nested) for key, nested in model_keys(model).items()
            }
        return name

    sections = {section: add(_model(section)) for section in _SECTIONS}
    return {"top_level": _top_level_from_deepspeed(), "sections": sections, "classes": classes}


# The table's layout and what it is read from: a change to either names another cache file.
_TABLE_LAYOUT = repr((1, sorted(_SECTIONS.items()), _CONSTANT_MODULES))


def cache_file(prefix: str = sys.prefix, table: str = "keys", layout: str = _TABLE_LAYOUT) -> Path | None:
    """Where a table read from the installed DeepSpeed (``table``: its name, ``layout``: what it holds and
    where it is read from) is kept; None when DeepSpeed's files are not recorded."""
    try:
        installed = metadata.distribution("deepspeed")
    except metadata.PackageNotFoundError:
        return None
    record = installed.read_text("RECORD")
    if record is None:
        return None
    stamp = hashlib.sha256((layout + record).encode()).hexdigest()[:16]
    return Path(prefix) / "zerogate-cache" / f"deepspeed-{installed.version}-{table}-{stamp}.json"


def kept_table(table: str, layout: str, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The table ``build`` reads from DeepSpeed, from its cache file (:func:`cache_file`) when there is one;
    read once and kept there otherwise, where the directory can be written."""
    cached = cache_file(table=table, layout=layout)
    if cached is not None and cached.exists():
        try:
            return json.loads(cached.read_text())
        except (OSError, ValueError):
            pass
    found = build()
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            partial.write_text(json.dumps(found, sort_keys=True))
            partial.replace(cached)  # whole or not at all: another process may be reading it
        except OSError:
            pass
    return found


@cache
def key_table() -> dict[str, Any]:
    """The key table (:func:`table_from_deepspeed`), from its cache file when there is one."""
    return kept_table("keys", _TABLE_LAYOUT, table_from_deepspeed)


def _suggest(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_model(
    node: dict[str, Any], name: str, classes: dict[str, Any], prefix: str
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    keys = classes[name]
    for key, value in node.items():
        path = f"{prefix}.{key}"
        if key not in keys:
            shown = name.rsplit(".", 1)[-1]
            problems.append((path, f"unknown key (not a field of DeepSpeed's {shown}){_suggest(key, keys)}"))
        elif keys[key] is not None and isinstance(value, dict):
            problems += _check_model(value, keys[key], classes, path)
    return problems


def unknown_keys(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted path, problem) for every key DeepSpeed would not read, in config order."""
    problems: list[tuple[str, str]] = []
    table = key_table()
    known = frozenset(table["top_level"])
    for key, value in config.items():
        if key in _SECTIONS:
            if isinstance(value, dict):
                problems += _check_model(value, table["sections"][key], table["classes"], key)
        elif key in _TYPED_SECTIONS:
            if isinstance(value, dict):
                allowed = _TYPED_SECTIONS[key]
                problems += [
                    (
                        f"{key}.{k}",
                        f"unknown key (DeepSpeed reads only {', '.join(sorted(allowed))})"
                        f"{_suggest(k, allowed)}",
                    )
                    for k in value
                    if k not in allowed
                ]
        elif key not in known:
            problems.append(
                (key, f"unknown top-level key (DeepSpeed would silently ignore it){_suggest(key, known)}")
            )
    return problems
