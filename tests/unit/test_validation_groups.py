"""validate_planner's three groups and its summary line (zerogate.analysis.planner_validation), the level a
published row's figure was read at (zerogate.config.published_setups), and fit verdicts with "may not fit".
Fast: rows are the shipped table's, checks are built by the judging functions, nothing is planned."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from zerogate.analysis.planner_validation import (
    CONSISTENCY,
    DOES_NOT_FIT,
    FITS,
    GRID_WITHIN,
    INDEPENDENT,
    MAY_NOT_FIT,
    READING_INSIDE,
    THIS_MACHINE,
    Spread,
    grid_rows,
    judge_outcome,
    judge_reading,
    not_judged,
    summarise,
    summary_line,
    table_text,
    worst_verdict,
)
from zerogate.bench import printed_rows
from zerogate.config.published_setups import PLAN_LEVEL_OF, MeasuredRow, parse_setups, read_setups
from zerogate.config.tables import read_yaml
from zerogate.contracts.planner_grid import GridLevel, PlannerGridTable
from zerogate.contracts.planner_validation import PlannerValidation, RowCheck
from zerogate.contracts.records import GitState
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SETUPS = REPO / "config" / "published_setups" / "setups.yaml"
GIB = 2**30


@pytest.fixture(scope="module")
def table():
    return read_setups(SETUPS, "config/published_setups/setups.yaml")


def measured(row_id: str, verdict: str, published: str = "fits", held_out: bool = False) -> RowCheck:
    memory = None if published == "fits" else "device"
    check = judge_outcome(published, memory, verdict, "rank 0 device memory needs 1 GiB of 2 GiB", "the plan")
    return RowCheck(
        id=row_id,
        kind="measured",
        group=INDEPENDENT,
        held_out=held_out,
        source="https://example.org/run",
        where="a run",
        checks=[check],
        not_expressed=[],
    )


def grid(within: list[bool | None]) -> PlannerGridTable:
    level = {
        "point": "llama-z3-mb1",
        "architecture": "llama",
        "parameters": 1_000_000,
        "scheme": "zero3",
        "stage": 3,
        "offload": "none",
        "micro_batch": 1,
        "seq_len": 128,
        "activation_checkpointing": False,
        "attention": "sdpa",
        "rank": 0,
        "predicted(bytes)": 100 * 2**20,
        "measured(bytes)": 104 * 2**20,
        "error(%)": -3.8,
        "target(%)": 10.0,
        "with_allocator_free_error(%)": None,
        "train(s)": None,
    }
    rows = [
        GridLevel.model_validate({**level, "level": f"level{i}", "within_target": w})
        for i, w in enumerate(within)
    ]
    return PlannerGridTable.model_validate(
        {
            "grid": "config/planner_grid.yaml",
            "grid_sha256": "0" * 64,
            "pipeline_version": "0",
            "git": GitState(commit=None, dirty=False).model_dump(),
            "packages": {},
            "recorded_at": "2026-12-03T00:00:00+00:00",
            "targets(%)": {},
            "rows": [r.model_dump(by_alias=True) for r in rows],
            "missed": [],
        }
    )


# ---- groups and the summary line ------------------------------------------------------------------------


def test_the_summary_line_leads_with_the_published_runs_then_this_machine_then_the_consistency_rows(table):
    estimator = next(r for r in table.setups if r.kind == "estimator_table")
    paper = next(r for r in table.setups if r.kind == "paper_figure")
    rows = [
        printed_rows.check_estimator_row(estimator),
        printed_rows.check_paper_row(paper),
        measured("a", FITS),
        *grid_rows(grid([True, False]), "results/bench/planner_grid.json"),
    ]
    assert [r.group for r in rows] == [CONSISTENCY, CONSISTENCY, INDEPENDENT, THIS_MACHINE]
    line = summary_line(summarise(rows), rows, "results/bench/planner_grid.json")
    positions = [line.index(group) for group in (INDEPENDENT, THIS_MACHINE, CONSISTENCY)]
    assert line.startswith(f"summary: {INDEPENDENT}: ") and positions == sorted(positions)
    assert "fits / out of memory agree 1/1" in line and "levels within target 1/2" in line
    assert "not prediction" in line.split(CONSISTENCY)[1]
    validation = PlannerValidation(
        table="setups.yaml",
        table_sha256="0" * 64,
        pipeline_version="0",
        git=GitState(commit=None, dirty=False),
        packages={},
        recorded_at="2026-12-03T00:00:00+00:00",
        grid="results/bench/planner_grid.json",
        rows=rows,
        summary=summarise(rows),
    )
    text = table_text(validation, "inside 2/3 judged")
    # The published step times' first predictions count with the independent checks, before this machine.
    last = text.rstrip("\n").splitlines()[-1]
    step_times = last.index("published step times, first predictions: inside 2/3 judged")
    assert last.index(INDEPENDENT) < step_times < last.index(THIS_MACHINE)
    headers = [text.index(f"== {group} ==") for group in (INDEPENDENT, THIS_MACHINE, CONSISTENCY)]
    assert headers == sorted(headers) and text.index(f"{estimator.id} [") > headers[2]
    assert text.index("a [measured]") < headers[1] < text.index("llama-z3-mb1 [cpu_grid]") < headers[2]


def test_a_grid_level_is_judged_as_bench_planner_grid_judged_it_and_an_unrun_grid_is_said_so():
    [row] = grid_rows(grid([True, False, None]), "g.json")
    assert [c.verdict for c in row.checks] == [PASS, FAIL, NOT_MEASURED]
    assert {c.target for c in row.checks} == {GRID_WITHIN}
    line = summary_line(summarise([measured("a", FITS)]), [measured("a", FITS)], None)
    assert f"{THIS_MACHINE}: not run here" in line


def test_a_reading_without_a_prediction_is_counted_apart_from_one_without_an_interval():
    row = measured("a", FITS)
    row.checks.append(judge_reading("peak", 10 * GIB, "unknown", Spread.exact(9 * GIB), "x", False))
    row.checks.append(not_judged("host memory", "900 GiB (host_rss)", None, "the source does not state ..."))
    line = summary_line(summarise([row]), [row])
    assert "readings inside 0/0, 1 without an interval (errors -10 %), 1 not predicted" in line


def test_held_out_rows_are_counted_again_on_their_own():
    rows = [measured("a", FITS), measured("b", DOES_NOT_FIT, held_out=True)]
    line = summary_line(summarise(rows), rows)
    assert "fits / out of memory agree 1/2" in line
    assert "of them held out (1 rows): fits / out of memory agree 0/1" in line


# ---- the level a figure was read at ---------------------------------------------------------------------


def test_every_measured_row_names_the_level_its_figure_was_read_at(table):
    rows = [r for r in table.setups if isinstance(r, MeasuredRow)]
    assert rows and all(r.published.level in (*PLAN_LEVEL_OF, "outcome") for r in rows)
    assert all((r.published.peak_bytes is None) == (r.published.level == "outcome") for r in rows)


@pytest.fixture(scope="module")
def raw_table():
    return read_yaml(SETUPS, "setups.yaml")


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda p: p.pop("level"), "Field required"),
        (lambda p: p.update(level="a guess"), "Input should be"),
        (lambda p: p.update(level="nvidia-smi"), "a figure (peak_bytes) names the level"),
        (lambda p: p.update(peak_bytes=GIB), "a figure (peak_bytes) names the level"),
    ],
)
def test_a_measured_row_without_a_level_or_with_one_its_figure_contradicts_is_refused_in_one_line(
    raw_table, change, problem
):
    raw = copy.deepcopy(raw_table)
    index = next(i for i, r in enumerate(raw["setups"]) if r["kind"] == "measured")
    row_id = raw["setups"][index]["id"]
    change(raw["setups"][index]["published"])
    with pytest.raises(InputError) as raised:
        parse_setups(raw, "setups.yaml")
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"setups.yaml: setups[{index}] ({row_id}): published.level"
    )
    assert problem in message


# ---- verdicts, "may not fit" and readings ---------------------------------------------------------------


@pytest.mark.parametrize(
    "verdict, published, agrees",
    [
        (FITS, "fits", True),
        (FITS, "out_of_memory", False),
        (DOES_NOT_FIT, "out_of_memory", True),
        (DOES_NOT_FIT, "fits", False),
        (MAY_NOT_FIT, "fits", True),
        (MAY_NOT_FIT, "out_of_memory", True),
    ],
)
def test_may_not_fit_agrees_with_either_outcome_and_the_others_with_their_own(verdict, published, agrees):
    memory = None if published == "fits" else "device"
    assert judge_outcome(published, memory, verdict, "", "").verdict == (PASS if agrees else FAIL)


def test_the_worst_check_decides_and_an_unknown_verdict_is_refused():
    assert worst_verdict([FITS, FITS]) == FITS and worst_verdict([]) == FITS
    assert worst_verdict([FITS, MAY_NOT_FIT]) == MAY_NOT_FIT
    assert worst_verdict([MAY_NOT_FIT, DOES_NOT_FIT, FITS]) == DOES_NOT_FIT
    with pytest.raises(ValueError):
        judge_outcome("fits", None, "fits maybe", "", "")


def test_the_summary_counts_the_share_of_may_not_fit():
    rows = [measured("a", FITS), measured("b", MAY_NOT_FIT), measured("c", DOES_NOT_FIT, "out_of_memory")]
    rows.append(measured("d", MAY_NOT_FIT, "out_of_memory"))
    line = summary_line(summarise(rows), rows)
    assert "fits / out of memory agree 4/4 (may not fit: 2 of 4, 50 %; at most 25 %)" in line


def test_a_reading_is_judged_inside_the_plans_interval_and_an_oom_message_as_a_lower_bound():
    inside = judge_reading("peak", 10 * GIB, "nvidia-smi", Spread(9 * GIB, 9.5 * GIB, 11 * GIB), "x", False)
    outside = judge_reading("peak", 12 * GIB, "nvidia-smi", Spread(9 * GIB, 9.5 * GIB, 11 * GIB), "x", False)
    assert (inside.verdict, outside.verdict, inside.target) == (PASS, FAIL, READING_INSIDE)
    bare = judge_reading("peak", 10 * GIB, "unknown", Spread.exact(9 * GIB), "x", False)
    assert bare.target is None and bare.verdict is None and round(bare.error_percent) == -10
    below = judge_reading("peak", 10 * GIB, "oom_message", Spread.exact(9 * GIB), "x", True)
    above = judge_reading("peak", 10 * GIB, "oom_message", Spread.exact(11 * GIB), "x", True)
    assert (below.verdict, above.verdict) == (FAIL, PASS)
