"""Pre-registered step-time predictions (docs/preregistered/*.predictions.yaml), typed: the ledger's interval
for each row of a table whose published figures were left out, written before anyone working on the ledger
read the figures.

A file names the table it predicts (``table``, step_times.yaml's schema with the figures redacted) and the
commit of the ledger that printed it (``predicted_at``); git's history of the file shows it was committed
before the rows' figures entered config/published_setups/step_times.yaml. Each prediction keeps what
``python -m zerogate.bench.step_time_rows --predictions-only`` prints: the interval (absent where the ledger
gave none), its unit, and the terms without a figure. zerogate.bench.step_time_rows writes the file
(``--write-predictions``) and reads every such file to judge each row by its first prediction
(zerogate.bench.step_time_judged.with_first).

``read_preregistered`` refuses a malformed file before anything is judged, with one line naming the file and
the key. Pure Python and pydantic: no torch.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import TypeAdapter, ValidationError, model_validator

from zerogate.config.tables import read_yaml, refuse_duplicate_ids
from zerogate.contracts.base import Record
from zerogate.errors import InputError

# Where the pre-registered files live, beside the redacted tables they predict.
PREREGISTERED_DIR = "docs/preregistered"
PREDICTIONS_SUFFIX = ".predictions.yaml"


class RegisteredPrediction(Record):
    """One row's interval as printed before its figure was read (``low``/``high`` in ``unit``, both absent
    where the ledger gave no interval), and the ledger's terms without a figure."""

    id: str
    unit: str
    low: float | None = None
    high: float | None = None
    missing: list[str] = []

    @model_validator(mode="after")
    def _an_interval_or_none(self) -> RegisteredPrediction:
        if (self.low is None) != (self.high is None):
            raise ValueError("low: an interval gives both low and high")
        if self.low is not None and not 0 < self.low <= self.high:
            raise ValueError(f"low: needs 0 < low <= high, got {self.low}..{self.high}")
        if self.low is None and not self.missing:
            raise ValueError("missing: a row without an interval names what the ledger lacked")
        return self

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)


class Preregistered(Record):
    """A set of predictions: the redacted ``table`` they are for, the ledger's commit that printed them,
    and one prediction per row."""

    table: str
    predicted_at: str
    predictions: list[RegisteredPrediction]


def read_preregistered(path: str | Path, file: str | None = None) -> Preregistered:
    """The predictions at ``path``, checked (``file``: the name errors give)."""
    shown = file or str(path)
    raw = read_yaml(path, shown)
    try:
        registered = TypeAdapter(Preregistered).validate_python(raw)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise InputError(shown, where, first["msg"].removeprefix("Value error, ")) from None
    refuse_duplicate_ids((p.id for p in registered.predictions), shown, "predictions")
    return registered


def registered_files(repo: Path) -> list[str]:
    """Every pre-registered predictions file under ``repo``, as paths relative to it, in name order."""
    folder = repo / PREREGISTERED_DIR
    return sorted(
        str(path.relative_to(repo)) for path in folder.glob(f"*{PREDICTIONS_SUFFIX}") if path.is_file()
    )


def write_preregistered(registered: Preregistered, path: Path) -> None:
    """``registered`` as YAML at ``path`` (written whole, then moved into place)."""
    text = yaml.safe_dump(registered.model_dump(exclude_none=True), sort_keys=False, width=110)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
