"""The claim's DeepSpeed config file, read and its keys checked against DeepSpeed's config classes
(zerogate.render.ds_keys). The Snakefile reads every profile's claim while it builds the DAG, so this module
loads neither DeepSpeed nor torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerogate.errors import InputError
from zerogate.render.ds_keys import unknown_keys


def check_keys(config: dict[str, Any], file: str) -> None:
    """Refuse a key DeepSpeed would not read (it ignores them silently), naming its dotted path."""
    problems = unknown_keys(config)
    if problems:
        path, why = problems[0]
        raise InputError(file, path, why)


def read_claim(path: str | Path, file: str | None = None) -> dict[str, Any]:
    """The claim's DeepSpeed config file, parsed and its keys checked (:func:`check_keys`); ``file`` is the
    name the error gives (the path as the profile states it)."""
    shown = file or str(path)
    try:
        claim = json.loads(Path(path).read_text())
    except OSError as error:
        raise InputError(shown, "", f"cannot be read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise InputError(shown, f"line {error.lineno}", f"not valid JSON ({error.msg})") from None
    if not isinstance(claim, dict):
        raise InputError(shown, "(top level)", "a DeepSpeed config is a JSON object")
    check_keys(claim, shown)
    return claim
