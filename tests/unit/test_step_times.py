"""The table of published step times (zerogate.config.step_times): the shipped table loads with its rows'
sources and stated setups, and a malformed row is refused with one line naming the file, the row and the
key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zerogate.config.step_times import parse_step_times, read_step_times
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TABLE = "config/published_setups/step_times.yaml"


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load((REPO / TABLE).read_text())


def test_the_shipped_table_loads_with_at_least_eight_sourced_rows_each_with_a_figure():
    table = read_step_times(REPO / TABLE, TABLE)
    assert len(table.rows) >= 8
    for row in table.rows:
        assert row.source.url.startswith("https://") and row.source.quote
        assert row.published.seconds is not None or row.published.tokens_per_second_per_gpu is not None
        if row.model.config is not None:
            assert (REPO / row.model.config).is_file(), row.id
    frameworks = {row.setup.framework for row in table.rows}
    assert "deepspeed" in frameworks and frameworks - {"deepspeed"}
    assert any(row.setup.offload_optimizer == "cpu" for row in table.rows)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("published", {"covers": "optimizer_step", "as_printed": "x"}, "published.seconds"),
        ("published", {"seconds": 1.0, "covers": "lunch", "as_printed": "x"}, "published.covers"),
        ("hardware", {"gpu": "A100", "total_gpus": 7}, "hardware.total_gpus"),
    ],
)
def test_a_malformed_row_is_refused_with_one_line_naming_the_file_row_and_key(raw, key, value, named):
    broken = {"rows": [dict(row) for row in raw["rows"]]}
    broken["rows"][1] = {**broken["rows"][1], key: value}
    with pytest.raises(InputError) as error:
        parse_step_times(broken, TABLE)
    line = str(error.value)
    assert "\n" not in line
    assert line.startswith(f"{TABLE}: rows[1] ({raw['rows'][1]['id']}): {named}"), line


def test_a_duplicate_id_is_refused(raw):
    doubled = {"rows": [raw["rows"][0], raw["rows"][0]]}
    with pytest.raises(InputError, match=TABLE):
        parse_step_times(doubled, TABLE)
