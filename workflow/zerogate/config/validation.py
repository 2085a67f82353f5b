"""Turn a JSON-schema validation error into one line that names the file and the key."""

from __future__ import annotations

from typing import Any

from zerogate.errors import InputError


def key_path(error: Any) -> list[str | int]:
    """The path of the offending key; for a misspelt key, the misspelt key itself."""
    path: list[str | int] = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        unexpected = sorted(k for k in error.instance if k not in allowed)
        if unexpected:
            path.append(unexpected[0])
    return path


def dotted(path: list[str | int]) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def describe(error: Any) -> str:
    """jsonschema's message, shortened for a single line."""
    if error.validator == "additionalProperties":
        return "unknown key (not in the schema; misspelt?)"
    if error.validator == "required":
        return error.message
    message = error.message.replace("\n", " ")
    return message if len(message) <= 160 else message[:157] + "..."


def to_input_error(file: str, error: Any) -> InputError:
    return InputError(file, dotted(key_path(error)), describe(error))
