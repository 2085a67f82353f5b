"""Profiles: named settings files in config/profiles/, with single inheritance through `extends`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from zerogate.config.base import Where, anywhere
from zerogate.config.model_data import SHAPE_KEYS, ModelSettings
from zerogate.config.settings import ProfileSettings, profile_settings
from zerogate.config.tables import read_yaml
from zerogate.errors import InputError
from zerogate.model.attention import check_model_attention
from zerogate.model.hf_config import config_file, load_config, shape_of


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge key by key, everything else (lists too) replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def profile_path(profiles_dir: str | Path, name: str) -> Path:
    """A profile's file: ``config/profiles/<name>.yaml``, or ``name`` itself when it is a ``.yaml`` path (a
    profile the planner wrote, say), relative to the repository (the folder above ``config/``)."""
    if name.endswith(".yaml"):
        path = Path(name)
        return path if path.is_absolute() else Path(profiles_dir).resolve().parents[1] / path
    return Path(profiles_dir) / f"{name}.yaml"


def profile_name(name: str) -> str:
    """The name a profile's results are filed under (results/<name>/...): a path's file name without .yaml."""
    return Path(name).stem if name.endswith(".yaml") else name


def available_profiles(profiles_dir: str | Path) -> list[str]:
    return sorted(p.stem for p in Path(profiles_dir).glob("*.yaml"))


def load_profile_chain(
    profiles_dir: str | Path, name: str, asked_by: str, key: str
) -> list[tuple[Path, dict]]:
    """The profile and its ancestors, root first, each with its raw mapping.

    ``asked_by`` and ``key`` name where the profile was requested, for the error message.
    """
    chain: list[tuple[Path, dict]] = []
    seen: set[str] = set()
    while True:
        path = profile_path(profiles_dir, name)
        if name in seen:
            raise InputError(asked_by, key, f"profiles extend each other in a cycle through '{name}'")
        seen.add(name)
        if not path.is_file():
            known = ", ".join(available_profiles(profiles_dir)) or "none"
            raise InputError(asked_by, key, f"unknown profile '{name}' (no {path}; known: {known})")
        raw = read_yaml(path, str(path)) or {}
        if not isinstance(raw, dict):
            raise InputError(str(path), "", "a profile must be a mapping of keys to values")
        chain.insert(0, (path, raw))
        parent = raw.get("extends")
        if parent is None:
            return chain
        asked_by, key, name = str(path), "extends", str(parent)


def resolve_profile(chain: list[tuple[Path, dict]]) -> dict[str, Any]:
    """Merge a chain from :func:`load_profile_chain`; ``extends`` is dropped from the result.

    A profile that names a ``model.config`` replaces the shape its ancestors state: their shape keys
    (zerogate.config.model_data.SHAPE_KEYS) are dropped before it is merged, so none leaks in beside the
    config."""
    merged: dict[str, Any] = {}
    for _, raw in chain:
        model = raw.get("model")
        if (
            isinstance(model, dict)
            and model.get("config") is not None
            and isinstance(merged.get("model"), dict)
        ):
            merged["model"] = {k: v for k, v in merged["model"].items() if k not in SHAPE_KEYS}
        merged = deep_merge(merged, raw)
    merged.pop("extends", None)
    return merged


def file_defining(chain: list[tuple[Path, dict]], key_path: list[str | int]) -> Path:
    """The last file of the chain that sets ``key_path`` (or its nearest parent): the one to fix. A
    list's index may be given as its digits (``gates.0.name``)."""
    key_path = [int(part) if isinstance(part, str) and part.isdigit() else part for part in key_path]
    for path, raw in reversed(chain):
        node: Any = raw
        found = True
        for part in key_path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                found = False
                break
        if found:
            return path
    return chain[-1][0]


def check_profile(
    profile: dict[str, Any], chain: list[tuple[Path, dict]], repo: str | Path
) -> ProfileSettings:
    """The profile's typed settings, after the checks the JSON schema cannot express; InputError naming
    the file that sets the key.

    The cross-field checks and defaults live in the settings models (zerogate.config.settings); this adds
    the checks that need the repository or the installed transformers (the model's attention
    implementation, zerogate.model.attention.check_model_attention)."""

    def where(key: str) -> str:
        return str(file_defining(chain, key.split(".")))

    template = Path(repo) / profile["deepspeed"]["template"]
    if not template.is_file():
        raise InputError(where("deepspeed.template"), "deepspeed.template", f"no such file: {template}")
    settings = with_model_config(profile_settings(profile, where), where)
    check_model_attention(settings.model, repo, where)
    return settings


def with_model_config(settings: ProfileSettings, where: Where = anywhere) -> ProfileSettings:
    """``settings`` with the shape keys of ``model.config`` filled in from the config file (read offline by
    zerogate.model.hf_config: any architecture transformers builds), so that every consumer reads one shape;
    unchanged without a config. InputError naming the profile key for a missing file, the config file and
    its key for a bad one, ``dataset.seq_len`` when the model has fewer positions."""
    if settings.model.config is None:
        return settings
    model, max_positions = model_with_config(settings.model, where)
    if settings.dataset.seq_len > max_positions:
        raise InputError(
            where("dataset.seq_len"),
            "dataset.seq_len",
            f"{settings.dataset.seq_len} exceeds the {max_positions} positions of {model.config}",
        )
    return settings.model_copy(update={"model": model})


def model_with_config(model: ModelSettings, where: Where = anywhere) -> tuple[ModelSettings, int]:
    """(``model`` with its shape keys filled in from ``model.config``, the model's positions); ``model``
    unchanged without a config. InputError naming ``model.config`` for a missing file."""
    if model.config is None:
        return model, 2**63
    file = config_file(model.config)
    if not (file.is_file() or (file / "config.json").is_file()):
        raise InputError(where("model.config"), "model.config", f"no such config.json: {file}")
    shape = shape_of(load_config(file))
    filled = model.model_copy(
        update={
            "architecture": shape.model_type,
            "hidden_size": shape.hidden_size,
            "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.attention_heads,
            "num_key_value_heads": shape.kv_heads,
            "intermediate_size": shape.intermediate_size,
            "vocab_size": shape.vocab_size,
            "tie_word_embeddings": shape.tied_embeddings,
        }
    )
    return filled, shape.max_positions


# Keys that change how many runs are made, how their uncertainty is estimated, or that disturb a run on
# purpose (a fault injection): runs that differ only in them measured the same thing, so ``compare`` groups
# them (and shows the injection beside each run).
NOT_MEASURED_KEYS = (("repeats",), ("intervals",), ("stabiliser", "inject"))


def measured_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """The resolved profile without NOT_MEASURED_KEYS: what a run measures, for comparing runs."""
    measured = copy.deepcopy(profile)
    for path in NOT_MEASURED_KEYS:
        node = measured
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return measured
