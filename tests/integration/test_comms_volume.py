"""Communication volume on the shared smoke run (tests/integration/conftest.py): the communication table, the
seed's 1.5x claim judged from it, and the report's Communication section. Reads smoke_run.results only."""

from __future__ import annotations

import csv
import html

import pytest

from tests.unit.helpers import settings
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.verdicts import CANNOT_JUDGE, ClaimVerdicts
from zerogate.render.comms_runs import SCHEMES

pytestmark = pytest.mark.integration


def test_every_scheme_measured_at_both_accumulations_and_agrees_with_theory(smoke_run, smoke_profile):
    table = CommsVolume.read(smoke_run.results / "comms/volume.json")
    accumulation = settings(smoke_profile).training.gradient_accumulation_steps
    assert table.accumulations == [1, accumulation]
    assert [(r.scheme, r.accumulation) for r in table.rows] == [
        (s, g) for s in SCHEMES for g in (1, accumulation)
    ]
    for row in table.rows:
        assert row.status == "run", row
        assert row.complete and sorted(row.ranks) == [0, 1], row.scheme
        # Within +-5 % of the theory; the departures from the paper's count are named terms, not a tolerance.
        assert row.within_tolerance, (row.scheme, row.accumulation, row.ratio)
        assert row.measured_calls == pytest.approx(row.theory.calls), row.scheme
    # The theory's parameter count is the ledger's (one count): DDP all-reduces every fp32 gradient once.
    ledger = LedgerTable.read(smoke_run.results / "ledger/ledger_vs_measured.json")
    assert table.parameters == ledger.parameters
    ddp = table.row("ddp", accumulation)
    assert ddp.ranks[0].kinds["all_reduce"].tensor_bytes == 4 * ledger.parameters
    zero3 = [r for r in table.rows if r.scheme == "zero3"]
    # ZeRO-3 gathers and reduce-scatters in every micro-step: its volume grows with the accumulation.
    assert zero3[1].measured_volume_bytes > (accumulation - 1) * zero3[0].measured_volume_bytes
    timing = list(
        csv.DictReader((smoke_run.results / "benchmarks/measure_comms_volume.tsv").open(), delimiter="\t")
    )
    print(f"measure_comms_volume took {float(timing[0]['s']):.1f} s")


def test_the_seed_claim_is_judged_from_the_measurement_and_reported(smoke_run):
    claims = ClaimVerdicts.read(smoke_run.results / "claims/seed/verdicts.json")
    measured = next(c for c in claims.claims if c.kind == "communication").measured_here
    assert measured.verdict != CANNOT_JUDGE, measured
    assert "measured" in measured.evidence and "accumulation 1" in measured.evidence
    report = html.unescape(next((smoke_run.results / "report").glob("zerogate-*.html")).read_text())
    assert "<h2>Communication</h2>" in report and "id='communication-kinds'" in report
    assert measured.evidence.split(":")[0] in report
