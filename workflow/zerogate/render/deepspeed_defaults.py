"""DeepSpeed's defaults for the settings zerogate renders and predicts with, taken from DeepSpeed itself: the
fields' defaults of its ZeRO config classes (deepspeed/runtime/zero/config.py ``DeepSpeedZeroConfig``,
offload_config.py ``DeepSpeedZeroOffloadParamConfig`` and ``DeepSpeedZeroOffloadOptimizerConfig``), the
default leaf-module classes (zero/leaf_module_config.py ``DEFAULT_LEAF_MODULE_CLASSES``); and ZeRO-0's
all-reduce bucket (engine.py ``MEMORY_OPT_ALLREDUCE_SIZE``), a constant of DeepSpeed's engine kept here as a
number.

They are read once per DeepSpeed installation into a table kept beside the key table
(zerogate.render.ds_keys.kept_table, ``<sys.prefix>/zerogate-cache``), so that reading them loads neither
DeepSpeed nor torch: the DAG's build and the torch-free analysis side import the modules that use them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from zerogate.render.ds_keys import kept_table

# The config classes whose fields' defaults the table keeps, by module and class name.
_CLASSES = (
    ("deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    ("deepspeed.runtime.zero.offload_config", "DeepSpeedZeroOffloadParamConfig"),
    ("deepspeed.runtime.zero.offload_config", "DeepSpeedZeroOffloadOptimizerConfig"),
)
# DeepSpeed's module-level constants the table keeps, by module and name.
_CONSTANTS = (("deepspeed.runtime.zero.leaf_module_config", "DEFAULT_LEAF_MODULE_CLASSES"),)
# ZeRO-0's all-reduce bucket in elements: deepspeed/runtime/engine.py MEMORY_OPT_ALLREDUCE_SIZE, the default
# bucket_size of the engine's allreduce_gradients. Kept as a number, not read through the table: the
# communication table (tabulate_comms_volume, whose environment envs/analysis.yaml has no DeepSpeed) counts
# ZeRO-0's all-reduce calls with it. tests/unit/test_deepspeed_defaults.py holds it equal to the installed
# DeepSpeed's.
ZERO0_ALLREDUCE_ELEMENTS = 500_000_000
# The table's layout and what it is read from: a change to either names another cache file.
_TABLE_LAYOUT = repr((1, _CLASSES, _CONSTANTS))


def _plain(value: Any) -> Any:
    """A default as JSON holds it (DeepSpeed's pretty-printing int subclass as an int, a list of class names
    as a list); None for a default that is not a plain value (a nested config class, a factory)."""
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return [str(item) for item in value]
    return None


def table_from_deepspeed() -> dict[str, Any]:
    """The defaults read from DeepSpeed: ``fields`` ({class name: {field name: default}}, plain defaults only)
    and ``constants`` ({module.name: value})."""
    fields: dict[str, dict[str, Any]] = {}
    for module, name in _CLASSES:
        model = getattr(importlib.import_module(module), name)
        fields[name] = {
            field: _plain(info.default)
            for field, info in model.model_fields.items()
            if info.default_factory is None and _plain(info.default) is not None
        }
    constants = {
        f"{module}.{name}": _plain(getattr(importlib.import_module(module), name))
        for module, name in _CONSTANTS
    }
    return {"fields": fields, "constants": constants}


@cache
def defaults_table() -> dict[str, Any]:
    """The defaults table (:func:`table_from_deepspeed`), from its cache file when there is one."""
    return kept_table("defaults", _TABLE_LAYOUT, table_from_deepspeed)


@dataclass(frozen=True)
class DeepSpeedDefaults:
    """The defaults zerogate uses where a rendered config leaves a key out, each named after DeepSpeed's own
    field (sizes in elements)."""

    reduce_bucket_size: int  # DeepSpeedZeroConfig, key reduce_bucket_size
    prefetch_bucket_size: int  # DeepSpeedZeroConfig, key stage3_prefetch_bucket_size
    param_persistence_threshold: int  # DeepSpeedZeroConfig, key stage3_param_persistence_threshold
    max_live_parameters: int  # DeepSpeedZeroConfig, key stage3_max_live_parameters
    max_reuse_distance: int  # DeepSpeedZeroConfig, key stage3_max_reuse_distance
    sub_group_size: int  # DeepSpeedZeroConfig, key sub_group_size
    memory_efficient_linear: bool  # DeepSpeedZeroConfig, key memory_efficient_linear
    param_buffer_count: int  # DeepSpeedZeroOffloadParamConfig, key offload_param.buffer_count
    param_buffer_size: int  # DeepSpeedZeroOffloadParamConfig, key offload_param.buffer_size
    optimizer_buffer_count: int  # DeepSpeedZeroOffloadOptimizerConfig, key offload_optimizer.buffer_count
    leaf_module_classes: tuple[str, ...]  # leaf_module_config.py DEFAULT_LEAF_MODULE_CLASSES


@cache
def deepspeed_defaults() -> DeepSpeedDefaults:
    """DeepSpeed's defaults (:class:`DeepSpeedDefaults`) of the installed release, from the kept table."""
    table = defaults_table()
    zero = table["fields"]["DeepSpeedZeroConfig"]
    param = table["fields"]["DeepSpeedZeroOffloadParamConfig"]
    optimizer = table["fields"]["DeepSpeedZeroOffloadOptimizerConfig"]
    constants = table["constants"]
    return DeepSpeedDefaults(
        reduce_bucket_size=zero["reduce_bucket_size"],
        prefetch_bucket_size=zero["prefetch_bucket_size"],
        param_persistence_threshold=zero["param_persistence_threshold"],
        max_live_parameters=zero["max_live_parameters"],
        max_reuse_distance=zero["max_reuse_distance"],
        sub_group_size=zero["sub_group_size"],
        memory_efficient_linear=zero["memory_efficient_linear"],
        param_buffer_count=param["buffer_count"],
        param_buffer_size=param["buffer_size"],
        optimizer_buffer_count=optimizer["buffer_count"],
        leaf_module_classes=tuple(
            constants["deepspeed.runtime.zero.leaf_module_config.DEFAULT_LEAF_MODULE_CLASSES"]
        ),
    )


def deepspeed_default(name: str) -> Any:
    """A dataclass field whose default is DeepSpeed's (the DeepSpeedDefaults field ``name``), read when an
    instance is made, not when the module is imported (the torch-free analysis side imports the dataclasses
    that use it, where the defaults table may not be kept yet and reading it would load DeepSpeed)."""
    return field(default_factory=lambda: getattr(deepspeed_defaults(), name))
