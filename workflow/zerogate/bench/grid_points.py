"""The planner's validation grid (config/planner_grid.yaml), typed and checked: CPU training runs, each a set
of profile overrides on one base profile, whose predicted peaks the ledger table sets against their
measurements (``make bench-planner-grid``: workflow/rules/bench.smk, zerogate.bench.planner_grid).

Each point becomes a profile file extending the base (:func:`point_profile`), trained and compared by the
pipeline's own rules under ``--config profile=<that file>``. :func:`check_grid` refuses the whole file before
any point trains: its structure here, then each point's resolved profile through the profile schema and the
settings (the same checks a profile given by name gets), with one line naming the grid file, the point and
the key (or the base profile's file, where the base sets the bad key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from zerogate.config.profile import check_profile, file_defining, load_profile_chain, resolve_profile
from zerogate.config.tables import read_yaml, refuse_duplicate_ids
from zerogate.config.validation import describe, dotted, key_path
from zerogate.contracts.base import Record
from zerogate.errors import InputError
from zerogate.render.variants import VARIANTS, variant_overrides

GRID_FILE = "config/planner_grid.yaml"
# A point's profile is written as <PROFILE_PREFIX><id>.yaml, so its results go to
# results/<PROFILE_PREFIX><id>/.
PROFILE_PREFIX = "planner-grid-"
ZeroVariant = Literal[tuple(VARIANTS)]  # type: ignore[valid-type]


class GridPoint(Record):
    """One training run: its id, its ZeRO stage and offloads (a zerogate.render.variants name), and the
    profile keys it sets on top of the base."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=80)]
    zero: ZeroVariant
    overrides: dict[str, Any] = Field(default_factory=dict)


class PlannerGrid(Record):
    base: Annotated[str, Field(min_length=1)]  # a profile name under config/profiles/ or a .yaml path
    points: Annotated[list[GridPoint], Field(min_length=1)]


def _structure_error(file: str, raw: dict[str, Any], error: ValidationError) -> InputError:
    first = error.errors()[0]
    location = list(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    points = raw.get("points")
    if (
        len(location) >= 2
        and location[0] == "points"
        and isinstance(location[1], int)
        and isinstance(points, list)
    ):
        index = location[1]
        point = points[index] if index < len(points) else None
        point_id = point.get("id") if isinstance(point, dict) else None
        where = f"points[{index}]" + (f" ({point_id})" if point_id else "")
        return InputError(file, f"{where}: {'.'.join(map(str, location[2:])) or '(point)'}", message)
    return InputError(file, ".".join(map(str, location)) or "(top level)", message)


def parse_grid(raw: object, file: str = GRID_FILE) -> PlannerGrid:
    """``raw`` (the parsed YAML) as the typed grid; InputError naming ``file``, the point and the key."""
    if not isinstance(raw, dict):
        raise InputError(file, "(top level)", "a mapping with the keys base and points was expected")
    try:
        grid = TypeAdapter(PlannerGrid).validate_python(raw)
    except ValidationError as error:
        raise _structure_error(file, raw, error) from None
    refuse_duplicate_ids((point.id for point in grid.points), file, "points")
    for index, point in enumerate(grid.points):
        if "extends" in point.overrides:
            raise InputError(
                file,
                f"points[{index}] ({point.id}): overrides.extends",
                "a point extends the grid's base; set base instead",
            )
    return grid


def read_grid(path: str | Path, file: str | None = None) -> PlannerGrid:
    """The grid at ``path``, its structure checked (``file``: the name errors give, as the user wrote it)."""
    shown = file or str(path)
    return parse_grid(read_yaml(path, shown), shown)


def point_ids(path: str | Path, file: str | None = None) -> list[str]:
    return [point.id for point in read_grid(path, file).points]


def profile_file_name(point_id: str) -> str:
    return f"{PROFILE_PREFIX}{point_id}.yaml"


def point_profile(
    grid: PlannerGrid, point: GridPoint, base_overrides: list[dict[str, Any]]
) -> dict[str, Any]:
    """The profile of ``point``: the base extended by the point's overrides, its DeepSpeed overrides the
    base's (``base_overrides``, as resolved), the point's own, then the stage and offloads of its ``zero``
    variant (zerogate.render.variants.variant_overrides, as the pipeline's variants are made)."""
    overrides = dict(point.overrides)
    deepspeed = dict(overrides.pop("deepspeed", None) or {})
    stated = list(deepspeed.pop("overrides", None) or [])
    reason = f"planner grid point {point.id}"
    variant = [
        {**override, "reason": f"{reason}: {override['reason']}"}
        for override in variant_overrides(point.zero)
    ]
    return {
        "extends": grid.base,
        "description": overrides.pop("description", None) or f"{reason} ({point.zero}), on {grid.base}",
        **overrides,
        "deepspeed": {**deepspeed, "overrides": [*base_overrides, *stated, *variant]},
    }


def _schema_error(file: str, chain: list[tuple[Path, dict]], where: str, error: Any) -> InputError:
    path = key_path(error)
    defining = file_defining(chain, path)
    if defining == chain[-1][0]:
        return InputError(file, f"{where}: overrides.{dotted(path)}", describe(error))
    return InputError(str(defining), dotted(path), describe(error))


def check_grid(repo: Path, file: str = GRID_FILE) -> tuple[PlannerGrid, dict[str, dict[str, Any]]]:
    """(the grid, each point's profile mapping by id), every point checked as a profile is (the profile
    schema, zerogate.config.profile.check_profile: the settings and the model config) before anything is
    written; InputError naming ``file``, the point and the key, or the base's file for a key the base sets."""
    grid = read_grid(repo / file, file)
    profiles_dir = repo / "config" / "profiles"
    base_chain = load_profile_chain(profiles_dir, grid.base, file, "base")
    base_overrides = list(resolve_profile(base_chain).get("deepspeed", {}).get("overrides", []))
    schema = json.loads((repo / "config" / "schemas" / "profile.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    profiles = {}
    for index, point in enumerate(grid.points):
        where = f"points[{index}] ({point.id})"
        profile = point_profile(grid, point, base_overrides)
        point_path = repo / file
        chain = [*base_chain, (point_path, {k: v for k, v in profile.items() if k != "extends"})]
        resolved = resolve_profile(chain)
        errors = sorted(validator.iter_errors(resolved), key=lambda e: list(e.absolute_path))
        if errors:
            raise _schema_error(file, chain, where, errors[0])
        try:
            check_profile(resolved, chain, repo)
        except InputError as error:
            if error.file == str(point_path):
                raise InputError(file, f"{where}: overrides.{error.key}", error.problem) from None
            raise
        profiles[point.id] = profile
    return grid, profiles


def write_profiles(repo: Path, out_dir: str | Path, file: str = GRID_FILE) -> list[Path]:
    """Every point's profile under ``out_dir`` (:func:`profile_file_name`), after the whole grid is
    checked."""
    _, profiles = check_grid(repo, file)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for point_id, profile in profiles.items():
        path = out / profile_file_name(point_id)
        path.write_text(
            f"# Written by the write_grid_profiles rule from {file}: edit that file, not this one.\n"
            + yaml.safe_dump(profile, sort_keys=False)
        )
        written.append(path)
    return written
