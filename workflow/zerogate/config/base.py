"""The base of every settings model (a profile's sections, config/config.yaml, config/claims.yaml): one
pydantic model per file or section, on the contracts' conventions (zerogate.contracts.base.Record: frozen,
closed), whose fields carry their own description, constraints and file rules, so that the JSON schemas
Snakemake validates against are generated from them (zerogate.config.schemas).

- :class:`Settings`: the base class. Subclasses list the JSON-schema conditions a file must meet beyond
  its fields' types (``FILE_RULES``: ``if``/``then`` requirements, see :func:`require`).
- :func:`setting`: a field with its description, default and constraints (``ge=1``, ``pattern=...``), and
  how a file treats it: ``stated`` (the file must state the key although the code has a default),
  ``filled`` (Snakemake's validate writes the default into the file's mapping, so it is part of the
  resolved profile and of its hash), ``null`` (the file may write null), ``refused`` (the one-line
  error's words after the value, instead of the generic ones), ``schema`` (JSON-schema keywords a file
  is held to beyond what the model checks).
- :data:`Int`, :data:`Bool`, :data:`Str`, :data:`Number` (:data:`OptionalNumber`): strict scalars (a bool
  is not an int, "5" is not a number). A whole :data:`Number` stays the int the YAML wrote where a file is
  read (context :data:`AS_WRITTEN`): the rule params built from it, and Snakemake's record of them, are the
  file's own; anywhere else (a script reading its params back) it is a float.
- :class:`AsWritten`: a mapping kept exactly as written (what the stages read is the dict), its JSON schema
  and (unless told not to) its check those of a typed spec.
- :func:`refuse`: a cross-field check's finding inside a validator: the dotted key and what is wrong,
  turned into one line naming the file by zerogate.config.validation.

Pure Python: no torch, no pandas (the Snakefile imports this while it builds the DAG).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import (
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainSerializer,
    Strict,
    ValidationInfo,
    WrapValidator,
)
from pydantic_core import PydanticCustomError, PydanticUndefined, core_schema

from zerogate.contracts.base import Record
from zerogate.errors import InputError

# Where a dotted key is set: a file (for a profile, the one of its `extends` chain that sets the key).
Where = Callable[[str], str]

# The validation context under which a file's numbers keep the type the YAML gave them (see Number).
AS_WRITTEN = "as_written"
READ_FROM_FILE = {AS_WRITTEN: True}

# A finding of a cross-field check: (the dotted key to change, what is wrong with it).
Problem = tuple[str, str]


def anywhere(key: str) -> str:
    """The stand-in file name when the settings do not come from a file."""
    return "profile"


def _number_as_written(value: Any, handler: Callable[[Any], float], info: ValidationInfo) -> float:
    number = handler(value)
    if type(value) is int and info.context and info.context.get(AS_WRITTEN):
        return value
    return number


def _as_is(value: Any) -> Any:
    return value


Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
# A real number: an int or a float in the file (never a bool or a string), dumped as held.
Number = Annotated[float, Strict(), WrapValidator(_number_as_written), PlainSerializer(_as_is)]
# A real number the file may leave out (None), dumped as a float (as pydantic dumps an optional float): the
# rule params built from it (model.parameters, say) hold a float whatever the file wrote.
OptionalNumber = Annotated[float, Strict(), WrapValidator(_number_as_written), PlainSerializer(float)] | None


@dataclass(frozen=True)
class InFile:
    """How a settings file treats a field (see :func:`setting`); applied to the field's JSON schema."""

    stated: bool = False
    filled: bool = False
    null: bool = False
    refused: str | None = None
    schema: tuple[tuple[str, Any], ...] = ()

    def __call__(self, schema: dict[str, Any]) -> None:
        if not self.filled:
            schema.pop("default", None)
        if not self.null:
            _drop_null(schema)
        schema.update(self.schema)


def _drop_null(schema: dict[str, Any]) -> None:
    """``X | None`` as the file sees it: the key absent is None, a written null is refused."""
    branches = schema.get("anyOf")
    if not branches or {"type": "null"} not in branches:
        return
    rest = [b for b in branches if b != {"type": "null"}]
    del schema["anyOf"]
    if len(rest) == 1:
        schema.update({k: v for k, v in rest[0].items() if k not in schema})
    else:
        schema["anyOf"] = rest


def setting(
    doc: str | None,
    default: Any = PydanticUndefined,
    *,
    factory: Callable[[], Any] | None = None,
    stated: bool = False,
    filled: bool = False,
    null: bool = False,
    refused: str | None = None,
    schema: dict[str, Any] | None = None,
    **constraints: Any,
) -> Any:
    """A field that documents itself (``doc`` is its description, in the model and in the schema; None for
    a section, which its class's docstring describes), with
    pydantic's ``constraints`` (ge, gt, le, lt, min_length, max_length, pattern) and how a file treats it:
    ``stated``, ``filled``, ``null`` and ``refused`` as the module says; ``schema``: JSON-schema keywords
    a file is held to beyond what the model checks (a key a file must not leave empty although the code's
    default is empty, say)."""
    rule = InFile(stated, filled, null, refused, tuple((schema or {}).items()))
    if factory is not None:
        return Field(default_factory=factory, description=doc, json_schema_extra=rule, **constraints)
    return Field(default, description=doc, json_schema_extra=rule, **constraints)


def in_file(field: Any) -> InFile:
    """The file rule of a model field (the default rule for a field made without :func:`setting`)."""
    extra = getattr(field, "json_schema_extra", None)
    return extra if isinstance(extra, InFile) else InFile()


def when(equal: dict[str, Any] | None = None, *, absent: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON-schema condition: the keys of ``equal`` have these values (or are absent), the keys of
    ``absent`` are absent."""
    condition: dict[str, Any] = {}
    if equal:
        condition["properties"] = {key: {"const": value} for key, value in equal.items()}
    if absent:
        condition["not"] = {"required": list(absent)}
    return condition


def require(condition: dict[str, Any], keys: list[str], otherwise: list[str] | None = None) -> dict[str, Any]:
    """A file rule: ``keys`` are required where ``condition`` (:func:`when`) holds, ``otherwise`` where
    it does not."""
    rule: dict[str, Any] = {"if": condition, "then": {"required": keys}}
    if otherwise:
        rule["else"] = {"required": otherwise}
    return rule


def _schema_of_settings(schema: dict[str, Any], cls: type[Settings]) -> None:
    """A model's JSON schema as a file sees it: the keys it must state, its conditional rules."""
    required = set(schema.get("required", []))
    required |= {name for name, field in cls.model_fields.items() if in_file(field).stated}
    if required:
        schema["required"] = [name for name in cls.model_fields if name in required]
    schema.update(cls.SCHEMA_EXTRA)
    if cls.FILE_RULES:
        schema["allOf"] = list(cls.FILE_RULES)


class Settings(Record):
    """A typed settings file or section: frozen, closed (a misspelt key is an error), each field
    documented. ``FILE_RULES`` are JSON-schema ``if``/``then`` requirements of the file (:func:`require`);
    ``SCHEMA_EXTRA`` other JSON-schema keywords of the model's object (e.g. ``minProperties``)."""

    model_config = ConfigDict(json_schema_extra=_schema_of_settings)

    FILE_RULES: ClassVar[tuple[dict[str, Any], ...]] = ()
    SCHEMA_EXTRA: ClassVar[dict[str, Any]] = {}


class AsWritten:
    """Annotation of a mapping field kept exactly as the file writes it (the stages read the dict, in the
    file's key order), whose JSON schema is that of the typed ``spec``. With ``check`` the mapping is also
    validated against ``spec`` (errors name the key inside it); without, only its being a mapping is (the
    spec is checked where the settings are read from a file, by the owner's own check)."""

    def __init__(self, spec: Any, check: bool = True) -> None:
        self.spec = spec
        self.check = check

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        spec = handler.generate_schema(self.spec)
        keep = core_schema.plain_serializer_function_ser_schema(
            _as_is, return_schema=core_schema.any_schema()
        )
        validate = self._checked if self.check else self._mapping
        return core_schema.no_info_wrap_validator_function(validate, spec, serialization=keep)

    @staticmethod
    def _checked(value: Any, handler: Callable[[Any], Any]) -> Any:
        handler(value)
        return value

    @staticmethod
    def _mapping(value: Any, handler: Callable[[Any], Any]) -> Any:
        if not isinstance(value, dict):
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
        return value


class Unique:
    """Annotation of a list whose items must differ (JSON schema ``uniqueItems``)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_after_validator_function(self._unique, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "uniqueItems": True}

    @staticmethod
    def _unique(items: Any) -> Any:
        seen: list[Any] = []
        for item in items:
            if item in seen:
                raise PydanticCustomError("unique", "{item} is listed twice", {"item": repr(item)})
            seen.append(item)
        return items


def refuse(problem: Problem | None) -> None:
    """Inside a model validator: the cross-field check's finding, if any, as pydantic's error (the key in
    its context, so zerogate.config.validation names the file that sets it)."""
    if problem is not None:
        key, text = problem
        raise PydanticCustomError("setting", "{problem}", {"key": key, "problem": text})


def raise_problem(problem: Problem | None, where: Where = anywhere) -> None:
    """Outside pydantic: the finding as InputError naming the file ``where`` gives for its key."""
    if problem is not None:
        key, text = problem
        raise InputError(where(key), key, text)
