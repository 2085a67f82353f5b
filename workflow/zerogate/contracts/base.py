"""The base of every contract: one frozen, typed class per file that passes from one rule to another.

Why pydantic (v2, already installed as DeepSpeed's own config library) rather than plain frozen
dataclasses: it validates a file against the class in one call, names the failing field by its path, and
maps the keys that carry units (``step_time(s)``) to Python names (``step_time_s``) through aliases, so
the writer and the reader share one spelling of every key and neither indexes the other's raw dict.

- :class:`Record` is a typed part of a file: frozen, closed (a key the class does not declare is an
  error, so a key renamed on the writer's side fails the reader at once), keys with units as aliases.
- :class:`Artefact` is a whole JSON file. It writes ``"contract": "<name>/<version>"`` first and refuses,
  on reading, a file of another contract or version, or with a missing or mistyped field, with one line
  naming the file and the field (:class:`ContractError`).
- :func:`read_lines` / :func:`line_of` are the JSON-lines counterpart (one :class:`Record` per line).

No torch, no pandas: the training side and the analysis side both import these classes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from zerogate.errors import InputError

R = TypeVar("R", bound="Record")
A = TypeVar("A", bound="Artefact")


class ContractError(InputError):
    """A file that breaks its contract. ``str(error)``: ``<file>: <field path>: <what is wrong>``."""


def _dotted(location: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def error_of(source: str, error: ValidationError) -> ContractError:
    """pydantic's report as one line: the first failing field's path and problem, and how many more."""
    problems = error.errors(include_url=False)
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    given = first.get("input")
    shown = "" if first["type"] == "missing" or isinstance(given, (dict, list)) else f", got {given!r}"
    return ContractError(source, _dotted(first["loc"]), f"{first['msg']}{shown}{more}")


class Record(BaseModel):
    """A typed part of a contract: frozen, closed, each key with its unit as the alias of a Python name."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        allow_inf_nan=True,
    )

    @classmethod
    def key(cls, name: str) -> str:
        """The key ``name`` has in the file (its alias, e.g. ``step_time_s`` -> ``step_time(s)``)."""
        field = cls.model_fields[name]
        return field.alias or name

    @classmethod
    def of(cls: type[R], data: Any, source: str) -> R:
        """``data`` (a parsed JSON value) as this class; ContractError naming ``source`` and the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise error_of(source, error) from None

    def as_json(self) -> dict[str, Any]:
        """The file's form: keys as aliases, values JSON-ready."""
        return self.model_dump(mode="json", by_alias=True)


class Artefact(Record):
    """A whole JSON file one rule writes and others read. Subclasses set ``CONTRACT`` (the artefact's
    name) and ``VERSION`` (raised whenever a field changes meaning or is removed)."""

    CONTRACT: ClassVar[str]
    VERSION: ClassVar[int] = 1

    @classmethod
    def stamp(cls) -> str:
        return f"{cls.CONTRACT}/{cls.VERSION}"

    @classmethod
    def parse(cls: type[A], data: Any, source: str) -> A:
        """A parsed file as this contract: its stamp checked first, then every field."""
        if not isinstance(data, dict):
            raise ContractError(source, "", f"not a {cls.CONTRACT} file: a JSON object was expected")
        stamp = data.get("contract")
        if stamp is None:
            raise ContractError(
                source,
                "contract",
                f"missing: not a zerogate {cls.CONTRACT} file (or written "
                "before contracts; rerun the rule that writes it)",
            )
        if stamp != cls.stamp():
            name, _, version = str(stamp).partition("/")
            problem = (
                f"a {name} file, not {cls.CONTRACT}"
                if name != cls.CONTRACT
                else f"contract version {version}, this zerogate reads {cls.VERSION}: rerun the rule that "
                "writes it"
            )
            raise ContractError(source, "contract", problem)
        return cls.of({k: v for k, v in data.items() if k != "contract"}, source)

    @classmethod
    def read(cls: type[A], path: str | Path) -> A:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ContractError(str(path), "", f"no such file (the {cls.CONTRACT} file)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ContractError(str(path), "", f"not valid JSON ({error})") from None
        return cls.parse(data, str(path))

    def as_json(self) -> dict[str, Any]:
        return {"contract": self.stamp(), **super().as_json()}

    def write(self, path: str | Path) -> Path:
        """Through a temporary file and a rename, so a reader never sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.as_json(), indent=2) + "\n")
        os.replace(tmp, path)
        return path


def line_of(record: Record) -> str:
    """One JSON-lines line of ``record`` (no newline)."""
    return json.dumps(record.as_json())


def read_lines(cls: type[R], path: str | Path) -> list[R]:
    """Every non-empty line of a JSON-lines file as ``cls``; ContractError naming the file, line and field."""
    path = Path(path)
    found: list[R] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise ContractError(where, "", f"not valid JSON ({error.msg})") from None
        found.append(cls.of(data, where))
    return found


def write_lines(path: str | Path, records: Iterable[Record]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line_of(r) + "\n" for r in records))
    os.replace(tmp, path)


def plain(value: Any) -> Any:
    """Typed settings (dataclasses, contracts) as plain JSON-ready values: what a rule's ``params`` hold,
    because Snakemake notices a changed param (and reruns the rule) only for builtin values
    (snakemake.persistence's param serialisation skips any other object)."""
    return TypeAdapter(type(value)).dump_python(value, mode="json", by_alias=True)


def typed(cls: Any, value: Any, source: str = "rule params") -> Any:
    """``value`` (plain, as :func:`plain` made it) as ``cls`` again, validated: how a script reads its
    params."""
    try:
        return TypeAdapter(cls).validate_python(value)
    except ValidationError as error:
        raise error_of(source, error) from None
