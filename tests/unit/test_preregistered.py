"""Pre-registered step-time predictions (zerogate.config.preregistered, zerogate.bench.step_time_rows): the
file the predictions-only run writes reads back, each registered row is judged by that first prediction
ahead of the ledger as it stands, a verdict is independent only while the ledger still gives the registered
interval, and a malformed or contradictory file is refused with one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zerogate.analysis.step_time_validation import same_interval
from zerogate.bench.step_time_judged import check_table, published_figure
from zerogate.bench.step_time_rows import main, provenance_line, report_lines
from zerogate.config.preregistered import read_preregistered, registered_files, write_preregistered
from zerogate.config.step_times import STEP_TIMES_FILE, read_step_times
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TABLE = STEP_TIMES_FILE
ROW = "zenflow-qwen2.5-1.5b-z2-2xa100-40g"


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """A one-row table with its figure, the same row redacted, and the predictions written for the redacted
    one by the command a pre-registration runs."""
    folder = tmp_path_factory.mktemp("prereg")
    raw = yaml.safe_load((REPO / TABLE).read_text())
    row = next(r for r in raw["rows"] if r["id"] == ROW)
    seen, redacted = folder / "seen.yaml", folder / "redacted.yaml"
    seen.write_text(yaml.safe_dump({"rows": [row]}))
    hidden = {**row, "published": {**row["published"], "seconds": 1.0, "as_printed": "REDACTED"}}
    redacted.write_text(yaml.safe_dump({"rows": [hidden]}))
    registered = folder / "redacted.predictions.yaml"
    assert main(["--table", str(redacted), "--predictions-only", "--write-predictions", str(registered)]) == 0
    return seen, redacted, registered


def test_the_written_predictions_read_back_with_the_interval_unit_and_commit(tables):
    seen, redacted, registered = tables
    file = read_preregistered(registered)
    assert file.table == str(redacted) and file.predicted_at
    (prediction,) = file.predictions
    row = read_step_times(seen).rows[0]
    assert prediction.id == ROW and prediction.unit == published_figure(row)[1]
    assert prediction.interval is not None and prediction.low < prediction.high


def test_a_registered_row_is_judged_by_its_first_prediction_and_is_independent_while_it_stands(tables):
    seen, _, registered = tables
    (result,) = check_table(REPO, str(seen), [str(registered)])
    assert result.first is not None and result.first.unchanged
    assert result.first.judged == result.judged
    assert "independent" in provenance_line(result)
    text = "\n".join(report_lines([result]))
    assert text.index("first prediction, committed before") < text.index("as it stands")
    independent = next(line for line in text.splitlines() if "still gives (independent)" in line)
    assert "/1 judged" in independent and "cannot be judged 0/1" in independent


def test_a_changed_interval_makes_the_verdict_in_sample_and_keeps_the_first_one(tables, tmp_path):
    seen, _, registered = tables
    file = read_preregistered(registered)
    (prediction,) = file.predictions
    # A registered interval twice as slow as the ledger's now: as if the ledger had changed since.
    moved = prediction.model_copy(update={"low": prediction.low * 2, "high": prediction.high * 2})
    shifted = tmp_path / "shifted.predictions.yaml"
    write_preregistered(file.model_copy(update={"predictions": [moved]}), shifted)
    (result,) = check_table(REPO, str(seen), [str(shifted)])
    assert result.first is not None and not result.first.unchanged
    assert result.first.judged.verdict == "outside" and result.judged.verdict != result.first.judged.verdict
    assert "in-sample" in provenance_line(result)
    lines = report_lines([result])
    independent = next(line for line in lines if "still gives (independent)" in line)
    assert "inside 0/0 judged" in independent


def test_an_interval_is_the_same_only_as_printed():
    assert same_interval((3.378e4, 1.042e5), (33781.2, 104213.0))
    assert not same_interval((3.378e4, 1.042e5), (33900.0, 104200.0))
    assert same_interval(None, None) and not same_interval(None, (1.0, 2.0))


@pytest.mark.parametrize(
    ("prediction", "named"),
    [
        ({"id": "a", "unit": "s", "low": 1.0}, "predictions.0"),
        ({"id": "a", "unit": "s", "low": 2.0, "high": 1.0}, "predictions.0"),
        ({"id": "a", "unit": "s"}, "predictions.0"),
    ],
)
def test_a_malformed_prediction_is_refused_with_one_line_naming_the_file(tmp_path, prediction, named):
    file = tmp_path / "bad.predictions.yaml"
    file.write_text(yaml.safe_dump({"table": "t.yaml", "predicted_at": "abc", "predictions": [prediction]}))
    with pytest.raises(InputError) as error:
        read_preregistered(file, "bad.predictions.yaml")
    line = str(error.value)
    assert "\n" not in line and line.startswith(f"bad.predictions.yaml: {named}"), line


def test_a_row_registered_twice_or_in_another_unit_is_refused(tables, tmp_path):
    seen, _, registered = tables
    with pytest.raises(InputError, match="also registered in"):
        check_table(REPO, str(seen), [str(registered), str(registered)])
    file = read_preregistered(registered)
    other = file.model_copy(
        update={"predictions": [file.predictions[0].model_copy(update={"unit": "tokens/s per GPU"})]}
    )
    wrong = tmp_path / "wrong.predictions.yaml"
    write_preregistered(other, wrong)
    with pytest.raises(InputError, match="unit"):
        check_table(REPO, str(seen), [str(wrong)])


def test_every_shipped_registration_predicts_its_redacted_table_in_the_units_of_the_rows_with_figures():
    table = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    files = registered_files(REPO)
    assert files
    for file in files:
        registered = read_preregistered(REPO / file, file)
        redacted = read_step_times(REPO / registered.table, registered.table).rows
        assert [p.id for p in registered.predictions] == [row.id for row in redacted], file
        for prediction in registered.predictions:
            assert prediction.unit == published_figure(table[prediction.id])[1], prediction.id
