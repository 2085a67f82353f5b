"""Where the model comes from: one profile field, ``model.source``.

    source: shape                      random initialisation from the profile's shape numbers (default)
    source: /path/to/hf_dir            a local directory in Hugging Face format (config.json + weights)
    source: /path/to/model.gguf        a local GGUF file (dequantised to fp32 by transformers)
    source: package:MODULE/FILE        a file shipped inside an installed Python package (offline weights)
    source: hub:ORG/NAME               a Hugging Face hub id: used from the local cache, downloaded only
    online

Relative paths are relative to the repository. Checks that cost nothing (the path exists, the GGUF's
architecture is one transformers can load) run when the profile is loaded; the hub look-up runs in the
``prepare_model`` rule, after the pre-flight check, so ``snakemake -n`` works offline.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from zerogate.errors import InputError

SHAPE = "shape"
HUB_PREFIX = "hub:"
PACKAGE_PREFIX = "package:"


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "shape", "hf_dir", "gguf" or "hub"
    location: str  # the resolved path, or the hub id
    spec: str  # the profile's value, for messages and provenance


def package_file(spec: str) -> Path:
    """``MODULE/FILE`` inside an installed package, found without importing it (its imports may be absent)."""
    module, _, relative = spec.partition("/")
    found = importlib.util.find_spec(module) if module else None
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"no installed Python package '{module}'")
    return Path(list(found.submodule_search_locations)[0]) / relative


def parse_source(spec: str | None, repo: str | Path = ".") -> ModelSource:
    """Classify ``model.source`` without touching the network. Raises FileNotFoundError for a missing path."""
    if spec is None or spec == SHAPE:
        return ModelSource(SHAPE, "", SHAPE)
    if spec.startswith(HUB_PREFIX):
        return ModelSource("hub", spec[len(HUB_PREFIX) :], spec)
    path = package_file(spec[len(PACKAGE_PREFIX) :]) if spec.startswith(PACKAGE_PREFIX) else Path(repo) / spec
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource("gguf", str(path), spec)
    if path.is_dir() and (path / "config.json").is_file():
        return ModelSource("hf_dir", str(path), spec)
    raise FileNotFoundError(f"{path} is neither a .gguf file nor a directory with a Hugging Face config.json")


def gguf_architecture(path: str | Path) -> str:
    """The ``general.architecture`` of a GGUF file (reads the header only)."""
    # Here, not at the top: the Snakefile imports this module (check_model_source), and gguf is needed only
    # for a GGUF source.
    from gguf import GGUFReader

    try:
        return str(GGUFReader(str(path)).fields["general.architecture"].contents())
    except (KeyError, ValueError, IndexError) as error:
        raise ValueError(f"not a readable GGUF file ({error})") from None


def check_gguf(path: str | Path) -> None:
    """Refuse a GGUF whose architecture transformers' GGUF loader does not support."""
    # Here, not at the top: the Snakefile imports this module (check_model_source) to build the DAG.
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    architecture = gguf_architecture(path)
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture '{architecture}' is not supported by transformers' GGUF loader "
            f"(supported: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})"
        )


def check_model_source(spec: str, profile_file: str, repo: str | Path) -> ModelSource:
    """The cheap checks of ``model.source`` (``spec``), as one-line InputErrors naming the file and the
    key."""
    try:
        source = parse_source(spec, repo)
    except FileNotFoundError as error:
        raise InputError(profile_file, "model.source", str(error)) from None
    if source.kind == "gguf":
        try:
            check_gguf(source.location)
        except ValueError as error:
            raise InputError(source.location, "general.architecture", str(error)) from None
    return source


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub can be reached: off when HF_HUB_OFFLINE is set, else one TCP connect."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes", "on"}:
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def resolve_hub(model_id: str, profile_file: str, online: bool | None = None) -> str:
    """A local directory for a hub id: the cache if it holds the model, a download only when online."""
    # Here, not at the top: the Snakefile imports this module (check_model_source) to build the DAG.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(model_id, local_files_only=True)
    except (LocalEntryNotFoundError, OSError, ValueError):
        pass
    if not (hub_reachable() if online is None else online):
        raise InputError(
            profile_file,
            "model.source",
            f"hub model '{model_id}' is not in the local Hugging Face cache and the hub cannot be reached "
            f"(offline); download it elsewhere and set model.source to its local directory",
        )
    return snapshot_download(model_id)
