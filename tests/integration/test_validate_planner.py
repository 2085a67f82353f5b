"""The validate_planner rule from a clean copy of the workflow: the shipped tables judged and written, the
table printed, a malformed table refused before any job. The rule plans every published row (about two
minutes of one core), so its run is a prefetched build (tests/integration/prefetch.py): it starts once the
smoke run has ended, beside the tests before this module, and needs nothing of the smoke run."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration import prefetch
from tests.unit.helpers import broken_copy, clean_checkout, run_snakemake
from zerogate.analysis.planner_validation import ESTIMATOR_ROUNDING, FITS, LARGEST_WITHIN, VERDICT_AGREES
from zerogate.bench import measured_rows
from zerogate.bench import planner_validation as validation
from zerogate.config.published_setups import read_setups
from zerogate.contracts.planner_validation import PlannerValidation
from zerogate.contracts.verdicts import PASS
from zerogate.model.hf_config import load_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SETUPS = REPO / validation.SETUPS_FILE


def snakemake(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(checkout, *args, timeout=600)


@dataclasses.dataclass(frozen=True)
class Validated:
    checkout: Path
    done: subprocess.CompletedProcess
    results: Path
    written: PlannerValidation


@prefetch.prefetched
def prepare_validation(tmp_path_factory, smoke_run):
    """validate_planner once, in a clean checkout of its own."""
    checkout = clean_checkout(tmp_path_factory.mktemp("checkout"))

    def build():
        return checkout, snakemake(checkout, "validate_planner", "--config", "machine=test")

    return build


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> Validated:
    """validate_planner run once from a clean checkout; the tests read what it wrote and printed."""
    checkout, done = prefetch.result(__name__, prepare_validation, tmp_path_factory, None)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = checkout / "results" / "planner_validation" / "setups"
    return Validated(checkout, done, results, PlannerValidation.read(results / "planner_validation.json"))


@pytest.fixture(scope="module")
def table():
    return read_setups(SETUPS, validation.SETUPS_FILE)


def written_row(validated: Validated, row_id: str):
    """The row as validate_planner wrote it (planner_validation.json)."""
    return next(r for r in validated.written.rows if r.id == row_id)


def test_validate_planner_writes_and_prints_the_table_from_a_clean_checkout(validated):
    done, results, written = validated.done, validated.results, validated.written
    assert [r.id for r in written.rows] == [r.id for r in read_setups(SETUPS).setups]
    assert {s.target for s in written.summary} >= {ESTIMATOR_ROUNDING, VERDICT_AGREES, LARGEST_WITHIN}
    text = (results / "planner_validation.txt").read_text()
    summary = text.strip().splitlines()[-1]
    assert summary.startswith("summary: independent (published runs): ") and summary in done.stdout
    assert "this machine (CPU grid): not run here" in summary and written.grid is None
    assert "ds-memory-t5-3b-z2-live-1x8-offopt-cpu [estimator_table] https://deepspeed.readthedocs.io" in text
    assert written.packages["deepspeed"] and written.table_sha256


def test_a_gpt2_row_is_planned_from_its_config(validated):
    gpt2 = written_row(validated, "xirider-gpt2-xl-1xv100-16g-z2-offopt-largest-mb12")
    assert gpt2.checks[0].target == VERDICT_AGREES and gpt2.checks[0].verdict == PASS
    assert gpt2.checks[0].predicted.startswith("may not fit: rank 0")  # 15.62 GiB (13.35-21.35) of 16 GiB
    assert gpt2.checks[1].target == LARGEST_WITHIN and gpt2.checks[1].predicted_value >= 1


def test_the_largest_micro_batch_validate_planner_found_fits_and_one_more_does_not(table, validated):
    row_id = "xirider-gpt2-xl-1xv100-16g-z2-offopt-largest-mb12"
    found = int(written_row(validated, row_id).checks[1].predicted_value)
    row = next(r for r in table.setups if r.id == row_id)
    config = load_config(REPO / row.model.config)
    host_stated = row.hardware.host_ram_bytes is not None
    at, above = (
        measured_rows.judged_fits(measured_rows.plan_measured(row, config, REPO, m), "both", host_stated)[0]
        for m in (found, found + 1)
    )
    assert at == FITS and above != FITS


def test_validate_planner_refuses_a_malformed_table_with_one_line_and_writes_nothing(validated, tmp_path):
    checkout = validated.checkout
    bad = broken_copy(SETUPS, tmp_path, 70, lambda r: r["setup"].update(zero_stage=4))
    # Where its results would go: a table of the same file name may have been judged there before (the
    # shipped one, by the test above), and stays as it was.
    results = checkout / "results" / "planner_validation" / bad.stem
    before = {path: path.stat().st_mtime_ns for path in results.rglob("*")}
    done = snakemake(checkout, "validate_planner", "--config", "machine=test", f"published_setups={bad}")
    assert done.returncode != 0
    row_id = yaml.safe_load(SETUPS.read_text())["setups"][70]["id"]
    assert (
        f"zerogate: error: {bad}: setups[70] ({row_id}): setup.zero_stage: Input should be 0, 1, 2 or 3"
        in done.stderr
    )
    # Refused while the workflow loads: no job ran, nothing was written or removed.
    assert {path: path.stat().st_mtime_ns for path in results.rglob("*")} == before
    assert "Select jobs to execute" not in done.stdout + done.stderr
    missing = snakemake(
        checkout, "validate_planner", "--config", "machine=test", "published_setups=none.yaml"
    )
    assert (
        missing.returncode != 0
        and "zerogate: error: --config: published_setups: no such file: none.yaml" in missing.stderr
    )
