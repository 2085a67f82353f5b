"""A DeepSpeed config's values by dotted path (``zero_optimization.stage``), and overrides
(``{"path": dotted.path, "value": ...}``) applied to a copy of it. Imports nothing heavy: the Snakefile's
DAG build reaches it through zerogate.render.variants."""

from __future__ import annotations

import copy
from typing import Any

# What get_path returns for a path the config does not hold (None is a value a config may hold).
MISSING = object()


def get_path(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_path(config: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = config
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def apply_overrides(ds_config: dict[str, Any], overrides: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``ds_config`` with each ``{"path": dotted.path, "value": ...}`` override set."""
    changed = copy.deepcopy(ds_config)
    for override in overrides:
        set_path(changed, override["path"], override["value"])
    return changed


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``: an override as the config fragment it writes."""
    node: dict[str, Any] = {}
    set_path(node, dotted, value)
    return node


def find_auto(config: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value still set to "auto"."""
    if isinstance(config, dict):
        return [p for k, v in config.items() for p in find_auto(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if config == "auto" else []
