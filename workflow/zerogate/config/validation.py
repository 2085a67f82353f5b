"""A validation error, from Snakemake's JSON-schema validation or from a settings model, as one line that
names the file and the dotted key: ``config/profiles/mine.yaml: stabiliser.policy: 'retry' is not one of
'abort', 'skip', 'rollback'``."""

from __future__ import annotations

import typing
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from zerogate.config.base import READ_FROM_FILE, AsWritten, Where, anywhere, in_file
from zerogate.errors import InputError

S = TypeVar("S", bound=BaseModel)


# ---- JSON schema (Snakemake's validate) --------------------------------------------------------------------


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


# ---- settings models (pydantic) ----------------------------------------------------------------------------


def build(cls: type[S], data: Any, where: Where = anywhere, prefix: str = "") -> S:
    """``data`` (a file's mapping, or the section of it under the dotted ``prefix``) as ``cls``, its
    numbers as written (zerogate.config.base.Number); InputError naming the file ``where`` gives for
    the first bad key."""
    try:
        return cls.model_validate({} if data is None else data, context=READ_FROM_FILE)
    except ValidationError as error:
        raise settings_error(error, cls, where, prefix) from None


def settings_error(
    error: ValidationError, cls: type[BaseModel], where: Where, prefix: str = ""
) -> InputError:
    """pydantic's first error as one line: the file that sets the key, the dotted key, what is wrong."""
    first = error.errors(include_url=False)[0]
    if first["type"] == "setting":  # a cross-field check's finding (zerogate.config.base.refuse)
        key = ".".join(part for part in (prefix, first["ctx"]["key"]) if part)
        return InputError(where(key), key, first["ctx"]["problem"])
    parts, field = located(cls, first["loc"])
    if first["type"] in TAG_ERRORS:  # a tagged union's tag: the key is the tag's
        parts.append(first["ctx"]["discriminator"].strip("'"))
    key = ".".join([prefix, *parts] if prefix else parts) or "(top level)"
    return InputError(where(key), key, problem_of(first, field))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings models a field's type holds (through unions, lists, Annotated and AsWritten specs)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, AsWritten):
        return _models_in(annotation.spec)
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return [m for a in (arguments[0], *annotation.__metadata__) for m in _models_in(a)]
    return [m for a in arguments for m in _models_in(a)]


def _literals(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return tuple(v for a in typing.get_args(annotation) for v in _literals(a))


def located(cls: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[str], FieldInfo | None]:
    """(the dotted key's parts, the field at the end) of pydantic's error location; a tagged union's tag,
    which pydantic puts in the location, is no key of the file and is left out."""
    parts: list[str] = []
    field: FieldInfo | None = None
    models = [cls]
    for part in loc:
        owner = next((m for m in models if part in m.model_fields), None)
        tagged = [m for m in models if any(part in _literals(f.annotation) for f in m.model_fields.values())]
        if owner is not None:
            field = owner.model_fields[part]
            models = [m for a in (field.annotation, *field.metadata) for m in _models_in(a)]
        elif isinstance(part, str) and tagged:
            models = tagged
            continue
        elif not isinstance(part, int):
            field, models = None, []
        parts.append(str(part))
    return parts, field


TYPE_NAMES = {
    "int_type": "int",
    "bool_type": "bool",
    "float_type": "float",
    "string_type": "str",
    "dict_type": "dict",
    "list_type": "list",
    "tuple_type": "list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
# pydantic's bound errors in jsonschema's words (the schema's message for the same value).
BOUNDS = {
    "greater_than_equal": ("ge", "is less than the minimum of"),
    "greater_than": ("gt", "is less than or equal to the minimum of"),
    "less_than_equal": ("le", "is greater than the maximum of"),
    "less_than": ("lt", "is greater than or equal to the maximum of"),
}


TAG_ERRORS = ("union_tag_invalid", "union_tag_not_found")


def problem_of(error: Any, field: FieldInfo | None) -> str:
    """What is wrong: the field's own words (``refused``), else jsonschema's words for the same problem."""
    kind, given, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "union_tag_invalid":
        return f"{ctx['tag']!r} is not one of {ctx['expected_tags']}"
    if kind == "union_tag_not_found":
        return "required (the kind of entry)"
    if kind == "extra_forbidden":
        return "unknown key (not in the schema; misspelt?)"
    if kind == "missing":
        return f"required ({field.description})" if field is not None and field.description else "required"
    refused = in_file(field).refused if field is not None else None
    if refused:
        return f"{given!r} {refused}"
    if kind == "literal_error":
        allowed = _literals(field.annotation) if field is not None else ()
        return f"{given!r} is not one of " + (", ".join(map(repr, allowed)) or ctx.get("expected", ""))
    if kind in TYPE_NAMES:
        return f"{given!r} is not {TYPE_NAMES[kind]}"
    if kind in BOUNDS:
        bound, words = BOUNDS[kind]
        return f"{given!r} {words} {ctx[bound]}"
    if kind == "string_pattern_mismatch":
        return f"{given!r} does not match {ctx['pattern']!r}"
    if kind in ("string_too_short", "too_short"):
        return f"{given!r} should be non-empty" if ctx.get("min_length") == 1 else f"{given!r} is too short"
    shown = "" if kind == "missing" or isinstance(given, (dict, list)) else f", got {given!r}"
    return error["msg"].removeprefix("Value error, ") + shown
