"""The JSON schemas Snakemake validates the configuration files against, generated from the settings models:
``python -m zerogate.config.schemas --write`` writes them (JSON, under config/schemas/: Snakemake reads a
JSON schema at once, where parsing the same schema as YAML took a tenth of every DAG build), ``--check`` fails
when a committed one differs from what its model generates (a unit test does the same).

:data:`SCHEMAS` maps each schema file to its model; another model is added there. The schema is pydantic's
JSON schema of the model, made readable and made to say what the file may hold: the nested models
inlined (no ``$ref``), no titles, descriptions on one line, each model's file rules
(zerogate.config.base.Settings.FILE_RULES) as ``allOf``, a tagged union (pydantic's ``oneOf`` with a
``discriminator``) as one object with an ``if``/``then`` per tag (so jsonschema names the key that is
missing or misspelt), a field the file may set to null as ``type: [..., "null"]``, and only the defaults
Snakemake is to fill in (``filled`` fields).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from zerogate.config.claims import ClaimsFile
from zerogate.config.machines import MachineDescription
from zerogate.config.run_config import RunConfig
from zerogate.config.settings import ProfileSettings

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "config" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

# schema file (under config/schemas/) -> the model it is generated from.
SCHEMAS: dict[str, type[BaseModel]] = {
    "profile.schema.json": ProfileSettings,
    "config.schema.json": RunConfig,
    "claims.schema.json": ClaimsFile,
    "machine.schema.json": MachineDescription,
}

# Keywords whose value is a schema, a list of schemas, or a mapping of names to schemas.
ONE = ("items", "additionalProperties", "if", "then", "else", "not", "propertyNames")
MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
NAMED = ("properties",)
# The order keywords are written in (the rest after them, as pydantic gave them).
ORDER = (
    "$schema",
    "description",
    "type",
    "const",
    "enum",
    "pattern",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "default",
    "additionalProperties",
    "required",
    "properties",
    "items",
    "if",
    "then",
    "else",
)
# pydantic's bounds on a number it could not place as JSON-schema keywords (a number inside an Optional or a
# list, whose validator keeps the file's int), in JSON schema's words.
BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The schema Snakemake validates a file of ``model`` against."""
    raw = model.model_json_schema()
    definitions = raw.pop("$defs", {})
    return {"$schema": DRAFT, **tidy(raw, definitions)}


def tidy(schema: Any, definitions: dict[str, Any]) -> Any:
    """One schema node as the module says: references inlined, titles dropped, tagged unions and nullable
    objects rewritten, keywords in :data:`ORDER`."""
    if not isinstance(schema, dict):
        return schema
    node = dict(schema)
    while "$ref" in node:
        target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**copy.deepcopy(target), **node}
    node.pop("title", None)
    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())
    if node.get("type") == "number":
        node = {BOUNDS.get(key, key): value for key, value in node.items()}
    for key in ONE:
        if isinstance(node.get(key), dict):
            node[key] = tidy(node[key], definitions)
    for key in MANY:
        if key in node:
            node[key] = [tidy(branch, definitions) for branch in node[key]]
    for key in NAMED:
        if key in node:
            node[key] = {name: tidy(branch, definitions) for name, branch in node[key].items()}
    if "discriminator" in node:
        node = tagged_union(node)
    node = nullable(node)
    ranked = sorted(node, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
    return {key: node[key] for key in ranked}


def tagged_union(node: dict[str, Any]) -> dict[str, Any]:
    """pydantic's ``oneOf`` + ``discriminator`` as one object: the tag required and one of its values, and
    for each value an ``if``/``then`` holding that branch's keys (closed, its required ones required)."""
    tag = node.pop("discriminator")["propertyName"]
    branches = node.pop("oneOf")
    values = [branch["properties"][tag]["const"] for branch in branches]
    rules = [
        {
            "if": {"type": "object", "required": [tag], "properties": {tag: {"const": value}}},
            "then": {key: v for key, v in branch.items() if key != "description"},
        }
        for value, branch in zip(values, branches, strict=True)
    ]
    return {
        **node,
        "type": "object",
        "required": [tag],
        "properties": {tag: {"enum": values}},
        "allOf": rules,
    }


def nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` with X of one type as X with ``type: [that type, "null"]``."""
    branches = node.get("anyOf")
    if not branches or len(branches) != 2 or {"type": "null"} not in branches:
        return node
    (other,) = [branch for branch in branches if branch != {"type": "null"}]
    if not isinstance(other.get("type"), str):
        return node
    merged = {key: value for key, value in node.items() if key != "anyOf"}
    return {**other, **merged, "type": [other["type"], "null"]}


def schema_text(name: str, model: type[BaseModel]) -> str:
    """The schema file's text: JSON, its ``$comment`` saying where it comes from."""
    comment = (
        f"Generated from {model.__module__}.{model.__name__} by `python -m zerogate.config.schemas --write`: "
        "edit the model, not this file (a unit test fails when the two differ)."
    )
    return json.dumps({"$comment": comment, **json_schema(model)}, indent=2, ensure_ascii=False) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The schema files under ``directory`` that differ from what their model generates."""
    return [
        name
        for name, model in SCHEMAS.items()
        if not (directory / name).is_file() or (directory / name).read_text() != schema_text(name, model)
    ]


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    written = []
    for name, model in SCHEMAS.items():
        path = directory / name
        path.write_text(schema_text(name, model))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zerogate.config.schemas", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--write", action="store_true", help="write every schema file of SCHEMAS")
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed schema is stale")
    parser.add_argument("--directory", type=Path, default=SCHEMA_DIR)
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.directory):
            print(f"wrote {path}")
        return 0
    if args.check:
        differing = stale(args.directory)
        for name in differing:
            print(
                f"{args.directory / name}: differs from its model (python -m zerogate.config.schemas --write)"
            )
        return 1 if differing else 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
