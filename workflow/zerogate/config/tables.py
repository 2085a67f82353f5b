"""Reading a YAML file a user edits (profiles, machine descriptions, published setups, the planner grid) with
one-line errors."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from zerogate.errors import InputError

# libyaml's loader where PyYAML was built with it (its wheels are): the same safe subset of YAML, parsed in C.
# Every Snakemake invocation reads the profile chain while it builds the DAG.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path, shown: str) -> object:
    """The parsed YAML at ``path``; InputError naming ``shown`` (the file as the user wrote it) when it
    cannot be read or is not YAML."""
    try:
        return yaml.load(Path(path).read_text(), Loader=SAFE_LOADER)
    except OSError as error:
        raise InputError(shown, "", f"cannot be read ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise InputError(shown, "", f"not valid YAML: {str(error).splitlines()[0]}") from None


def refuse_duplicate_ids(ids: Iterable[str], file: str, items: str) -> None:
    """InputError naming ``file`` and the later of two entries of the list ``items`` with one id."""
    seen: dict[str, int] = {}
    for index, item_id in enumerate(ids):
        if item_id in seen:
            raise InputError(
                file, f"{items}[{index}] ({item_id}): id", f"also the id of {items}[{seen[item_id]}]"
            )
        seen[item_id] = index
