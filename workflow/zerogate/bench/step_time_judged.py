"""Published step times judged (zerogate.analysis.step_time_validation): each row of a table by the ledger
as it stands (zerogate.bench.step_time_predict) and, where docs/preregistered/*.predictions.yaml
(zerogate.config.preregistered) holds its prediction, by that first prediction too, with whether the ledger
still gives it (the verdict then still an independent check). A run not made with DeepSpeed (FSDP, FSDP2,
HSDP) is shown with ZeRO-3's ledger and not judged: the ledger models DeepSpeed's streams and buckets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from zerogate.analysis.step_time_validation import NOT_JUDGED, Judged, judge, same_interval
from zerogate.bench.step_time_predict import Prediction, needs, predict
from zerogate.config.preregistered import (
    Preregistered,
    RegisteredPrediction,
    read_preregistered,
    registered_files,
)
from zerogate.config.step_times import STEP_TIMES_FILE, StepTimeRow, read_step_times
from zerogate.errors import InputError
from zerogate.model.hf_config import load_config
from zerogate.provenance import git_state


@dataclasses.dataclass(frozen=True)
class FirstPrediction:
    """A row's pre-registered prediction (zerogate.config.preregistered) judged against its published figure,
    and whether the ledger's interval is still the one registered (``unchanged``): where it is, the verdict
    as the ledger stands is still an independent check; where not, it is in-sample."""

    file: str
    predicted_at: str
    registered: RegisteredPrediction
    judged: Judged
    unchanged: bool


@dataclasses.dataclass(frozen=True)
class RowResult:
    row: StepTimeRow
    published: float
    unit: str
    prediction: Prediction | None
    judged: Judged
    first: FirstPrediction | None = None


def published_figure(row: StepTimeRow) -> tuple[float, str]:
    published = row.published
    if published.seconds is not None:
        return published.seconds, f"s per {published.per.replace('_', '-')} ({published.covers})"
    assert published.tokens_per_second_per_gpu is not None
    return published.tokens_per_second_per_gpu, "tokens/s per GPU"


def check_row(row: StepTimeRow, config: Any, repo: Path) -> RowResult:
    """The row's published figure against the ledger's interval, or why it cannot be."""
    value, unit = published_figure(row)
    lacking = needs(row)
    if lacking:
        why = f"the prediction needs what the row does not give: {', '.join(lacking)}"
        return RowResult(row, value, unit, None, Judged(NOT_JUDGED, None, None, why))
    try:
        prediction = predict(row, config, repo)
    except InputError as error:
        return RowResult(
            row, value, unit, None, Judged(NOT_JUDGED, None, None, f"cannot be planned: {error}")
        )
    judged = judged_row(row, value, prediction.interval, prediction.missing)
    return RowResult(row, value, unit, prediction, judged)


def judged_row(
    row: StepTimeRow,
    published: float,
    interval: tuple[float, float] | None,
    missing: tuple[str, ...] | list[str],
) -> Judged:
    """The row's figure against an interval (the ledger's now, or one registered before the figure was read);
    a run not made with DeepSpeed, or a figure whose unit the source does not state, is shown and not
    judged."""
    judged = judge(published, interval, list(missing), row.published.seconds is None)
    reading = row.published.unit_unstated
    if reading is not None:
        why = f"the source does not state its figure's unit (read as {reading}); {judged.why}"
        judged = dataclasses.replace(judged, verdict=NOT_JUDGED, why=why)
    if row.setup.framework != "deepspeed":
        framework = row.setup.framework
        why = f"framework {framework}: the ledger models DeepSpeed ZeRO (shown: ZeRO-3's); {judged.why}"
        judged = dataclasses.replace(judged, verdict=NOT_JUDGED, why=why)
    return judged


def registered_by_id(
    repo: Path, files: list[str]
) -> dict[str, tuple[str, Preregistered, RegisteredPrediction]]:
    """Every pre-registered prediction in ``files`` by its row's id, with its file; a row registered twice is
    refused (its first prediction must be one)."""
    found: dict[str, tuple[str, Preregistered, RegisteredPrediction]] = {}
    for file in files:
        registered = read_preregistered(repo / file, file)
        for prediction in registered.predictions:
            if prediction.id in found:
                raise InputError(
                    file, f"predictions ({prediction.id})", f"also registered in {found[prediction.id][0]}"
                )
            found[prediction.id] = (file, registered, prediction)
    return found


def with_first(
    result: RowResult, file: str, registered: Preregistered, prediction: RegisteredPrediction
) -> RowResult:
    """``result`` with its row's pre-registered prediction judged (FirstPrediction); the registered unit must
    be the row's."""
    if prediction.unit != result.unit:
        raise InputError(
            file, f"predictions ({prediction.id}).unit", f"{prediction.unit!r}, the row's is {result.unit!r}"
        )
    now = None if result.prediction is None else result.prediction.interval
    first = FirstPrediction(
        file,
        registered.predicted_at,
        prediction,
        judged_row(result.row, result.published, prediction.interval, prediction.missing),
        same_interval(prediction.interval, now),
    )
    return dataclasses.replace(result, first=first)


def check_table(
    repo: Path, file: str = STEP_TIMES_FILE, preregistered: list[str] | None = None
) -> list[RowResult]:
    """Every row judged by the ledger as it stands and, where a file of ``preregistered`` (default: every
    one under docs/preregistered) holds its prediction, by that first prediction too."""
    table = read_step_times(repo / file, file)
    registered = registered_by_id(repo, registered_files(repo) if preregistered is None else preregistered)
    results = []
    for row in table.rows:
        config = None if row.model.config is None else load_config(repo / row.model.config)
        result = check_row(row, config, repo)
        if row.id in registered:
            result = with_first(result, *registered[row.id])
        results.append(result)
    return results


def registered_predictions(results: list[RowResult], table: str, repo: Path) -> Preregistered:
    """The predictions of ``results`` as a pre-registered file's contents, at the ledger's commit now."""
    state = git_state(repo)
    commit = (state["commit"] or "unknown")[:7] + ("-dirty" if state["dirty"] else "")

    def registration(result: RowResult) -> RegisteredPrediction:
        interval = None if result.prediction is None else result.prediction.interval
        low, high = interval if interval is not None else (None, None)
        missing = list(result.prediction.missing) if result.prediction else [result.judged.why]
        return RegisteredPrediction(id=result.row.id, unit=result.unit, low=low, high=high, missing=missing)

    return Preregistered(table=table, predicted_at=commit, predictions=[registration(r) for r in results])
