"""zerogate.analysis.comms on hand-made records: per-step volumes through the one definition, theory beside
them, and the rows that must never vanish (a scheme not run, a rank missing, a collective kind unknown)."""

from __future__ import annotations

import pytest

from tests.conftest import CPU_FINGERPRINT
from zerogate.analysis import claims as c
from zerogate.analysis.comms import claim_verdict, load_records, measured_per_step, scheme_ratio, tabulate
from zerogate.config.claims import CommunicationClaim, StatedFigure
from zerogate.config.machines import from_fingerprint
from zerogate.contracts.comms import CommsRecord, HostDeviceCopies, KindVolume, LoggedCalls, TheorySettings
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.run import DsConfig, ZeroView
from zerogate.contracts.verdicts import (
    DOES_NOT_HOLD,
    HOLDS,
    ClaimedBox,
    ClaimVerdict,
    ClaimVerdicts,
    JudgedClaim,
)
from zerogate.predict.planner import plan
from zerogate.predict.setup import Setup
from zerogate.render.comms_runs import SCHEMES, scheme_setup
from zerogate.report.html import section

# 1000 + 100 elements above the persistence threshold (50), 10 and 6 at or below it; fp32; 2 ranks.
NUMELS = [1000, 100, 10, 6]
PHI = sum(NUMELS)
# As count_parameters records them: 1000 and 6 outside the one decoder layer (FSDP2's root), 100 and 10 in it,
# each flat (its first dimension its size).
COUNTS = ModelCounts(
    total=PHI,
    largest_layer=1000,
    numels=tuple(NUMELS),
    hidden=1,
    layers=1,
    heads=1,
    vocab=1,
    tied_embeddings=False,
    largest_block=110,
    first_dims=tuple(NUMELS),
    blocks=(-1, 0, 0, -1),
)
SETTINGS = TheorySettings(
    persistence_threshold=50,
    reduce_bucket_elements=500_000_000,
    prefetch_bucket_elements=50_000_000,
    max_reuse_distance=1_000_000_000,
    leaf_blocks=False,
    multi_rank_bucket_allreduce=True,
    gradient_clipping=1.0,
)


def calls(name: str, msg_bytes: int, count: int) -> LoggedCalls:
    return LoggedCalls(name=name, msg_bytes=msg_bytes, calls=count)


def measured(scheme: str, accumulation: int) -> list[LoggedCalls]:
    """What DeepSpeed 0.19.8's comms logger records for the model above, per optimizer step (as measured)."""
    g = accumulation
    grads = PHI * 4
    if scheme == "ddp":
        return [calls("all_reduce", grads, 1), calls("broadcast", 32, 1)]
    if scheme == "zero0":
        return [calls("all_reduce", grads, 1), calls("all_reduce", 4, 1)]
    if scheme in ("zero1", "zero2"):
        return [
            calls("all_reduce", grads, g if scheme == "zero2" else 1),
            calls("all_reduce", 4, 1),
            calls("all_gather_into_tensor", grads // 2, 1),
        ]
    if scheme == "fsdp2":  # as the dispatch-mode recorder records FSDP2 (gathers log the rank's partition)
        return [
            calls("all_gather_into_tensor", 1006 * 4 // 2, g),  # the root, forward only
            calls("all_gather_into_tensor", 110 * 4 // 2, 2 * g),  # the layer, forward and backward
            calls("reduce_scatter_tensor", 1006 * 4, g),
            calls("reduce_scatter_tensor", 110 * 4, g),
            calls("all_reduce", 4 * 4, 1),
        ]  # one fp32 local norm per parameter
    norm = 8 if scheme == "zero3" else 4
    return [
        calls("all_gather_into_tensor", 1100 * 4 // 2, g),  # one coalesced gather
        calls("all_gather_into_tensor", 5 * 4, 1),  # persistent 10
        calls("all_gather_into_tensor", 3 * 4, 1),  # persistent 6
        calls("reduce_scatter_tensor", grads, g),
        calls("all_reduce", norm, 1),
    ]


def record(
    scheme: str,
    accumulation: int,
    rank: int,
    phase: list[LoggedCalls] | None = None,
    status: str = "run",
    reason: str | None = None,
    steps: int = 1,
) -> CommsRecord:
    """One rank's record of one scheme, as zerogate.train.comms_volume writes it."""
    entries = phase if phase is not None else measured(scheme, accumulation)
    stage = scheme_setup(scheme)[0] or 0
    return CommsRecord(
        scheme=scheme,
        accumulation=accumulation,
        rank=rank,
        world_size=2,
        status=status,
        reason=reason,
        warmup_steps=1,
        measured_steps=steps,
        seconds=1.0,
        rss_after_gib=0.5,
        recorder="test",
        phases={
            "init": [],
            "warmup": [],
            "measured": [calls(e.name, e.msg_bytes, e.calls * steps) for e in entries],
        },
        counts=COUNTS,
        buffer_bytes=32,
        dtype="fp32",
        dtype_bytes=4,
        theory_settings=SETTINGS,
        accelerator="cpu",
        host_device_copies=HostDeviceCopies(counted=False, reason="CPU accelerator"),
        ds_config=DsConfig(
            train_micro_batch_size_per_gpu=1,
            gradient_accumulation_steps=accumulation,
            zero_optimization=ZeroView(stage=stage),
        ).raw,
    )


def every_record(changes: dict | None = None) -> list[CommsRecord]:
    changes = changes or {}
    return [
        changes.get((s, g, r), record(s, g, r))
        for s in SCHEMES
        for g in (1, 4)
        for r in (0, 1)
        if changes.get((s, g, r), True) is not None
    ]


def claimed_plan():
    """The planner's plan of the model above on a CPU box (the claims' evidence always carries one)."""
    setup = Setup(
        ranks=2,
        nodes=1,
        dtype="fp32",
        device_kind="cpu",
        micro_batch=1,
        seq_len=64,
        accumulation=4,
        stage=3,
        offload_optimizer=True,
        offload_param=True,
        pin_memory=False,
        reduce_bucket=500_000_000,
        prefetch_bucket=50_000_000,
        persistence_threshold=50,
    )
    return plan(COUNTS, setup, from_fingerprint(CPU_FINGERPRINT, "box"), profile="cpu-tiny")


def test_every_scheme_agrees_with_its_theory():
    table = tabulate(every_record())
    assert [(r.scheme, r.accumulation) for r in table.rows] == [(s, g) for s in SCHEMES for g in (1, 4)]
    for row in table.rows:
        assert row.status == "run" and row.complete
        assert row.ratio == pytest.approx(1.0), row.scheme
        assert row.within_tolerance
    zero3 = table.row("zero3", 1)
    # The paper's 3 Phi; DeepSpeed keeps the model gathered for the backward: measured = paper + departures.
    assert zero3.base_ratio == pytest.approx(zero3.measured_volume_bytes / (3 * PHI * 4 * 0.5))
    assert zero3.explained_by_terms
    assert zero3.ranks[0].kinds["all_gather"].calls == 3  # one coalesced + two persistent


def test_volumes_are_per_optimizer_step_and_use_the_one_definition():
    per_step = measured_per_step([calls("all_gather_into_tensor", 100, 6)], steps=3, world=2)
    gather = per_step["kinds"]["all_gather"]
    assert gather["calls"] == 2
    assert gather["tensor_bytes"] == 2 * 200  # the logged partition x N: the full tensor
    assert gather["volume_bytes"] == 2 * 200 * 0.5
    table = tabulate(every_record({("zero1", 1, r): record("zero1", 1, r, steps=3) for r in (0, 1)}))
    assert table.row("zero1", 1).ratio == pytest.approx(1.0)


def test_an_unknown_collective_kind_is_shown_by_name_and_never_zero():
    odd = measured("zero0", 1) + [calls("all_to_all_single", 64, 2)]
    table = tabulate(every_record({("zero0", 1, 0): record("zero0", 1, 0, phase=odd)}))
    row = table.row("zero0", 1)
    unknown = row.ranks[0].kinds["all_to_all_single"]
    assert unknown == KindVolume(
        calls=2, tensor_bytes=128, volume_bytes=None, known=False, record_names=["all_to_all_single"]
    )
    assert row.ranks[0].unknown_kinds == ["all_to_all_single"]
    assert not row.complete and not row.within_tolerance


def test_a_scheme_that_did_not_run_keeps_its_row_with_the_reason():
    failed = {
        ("zero3-offload-all", 4, r): record(
            "zero3-offload-all", 4, r, phase=[], status="not_run", reason="RuntimeError: out of memory"
        )
        for r in (0, 1)
    }
    table = tabulate(every_record(failed))
    row = table.row("zero3-offload-all", 4)
    assert row.status == "not_run" and "out of memory" in row.reason
    # A scheme with no record at all is a row too.
    gone = {("ddp", g, r): None for g in (1, 4) for r in (0, 1)}
    table = tabulate(every_record(gone))
    assert table.row("ddp", 1).status == "not_run"
    assert scheme_ratio(table, 1)["measured"] is None and "ddp not run" in scheme_ratio(table, 1)["why"]


def test_a_missing_rank_is_listed_and_the_row_incomplete():
    table = tabulate(every_record({("zero2", 4, 1): None}))
    row = table.row("zero2", 4)
    assert row.missing_ranks == [1] and not row.complete
    assert list(row.ranks) == [0]


def test_the_claim_verdict_from_the_measured_ratio(tmp_path):
    for rec in every_record():
        rec.write(tmp_path / rec.scheme / f"g{rec.accumulation}" / f"rank{rec.rank}.json")
    table = tabulate(load_records(tmp_path))
    verdict = claim_verdict(table, 1.5, 4)
    ddp = 2 * PHI * 4 * 0.5 + 32 * 0.5
    zero3_one = (1100 * 4 + 16 * 4 + PHI * 4) * 0.5 + 8  # one gather, persistent, reduce-scatter, fp64 norm
    assert verdict["at_accumulation_1"]["measured"] == pytest.approx(zero3_one / ddp)
    assert verdict["holds_at_accumulation_1"] is False  # about 1.0: the model is never gathered twice
    assert verdict["departures"][0]["name"] == "parameters kept for reuse (no backward re-gather)"
    assert verdict["at_claim_accumulation"]["measured"] == pytest.approx(
        (4 * (1100 * 4 + PHI * 4) * 0.5 + 16 * 4 * 0.5 + 8) / ddp
    )
    assert claim_verdict(table, 1.5, 16)["at_claim_accumulation"]["measured"] is None
    claim = CommunicationClaim(  # config/claims/seed.yaml's entry
        id="zero3_communication",
        statement="ZeRO-3 communicates 1.5 x DDP's volume",
        kind="communication",
        ddp_volume=2,
        zero3_volume=3,
        stated=StatedFigure(value=1.5),
    )
    evidence = c.Evidence(claimed_plan(), communication=table, claim_accumulation=4)
    _, here = c.judge_communication(claim, evidence)
    assert here.verdict == DOES_NOT_HOLD and "kept for reuse" in here.evidence
    _, close = c.judge_communication(claim.model_copy(update={"stated": StatedFigure(value=1.0)}), evidence)
    assert close.verdict == c.HOLDS_ONLY_WHEN


def test_ddp_within_the_paper_needs_no_explanation():
    table = tabulate(every_record())
    assert not table.row("ddp", 1).explained_by_terms  # a 16-byte buffer broadcast: within +-5 % anyway


def test_the_report_section_shows_every_row_the_unknown_kind_and_the_claim():
    odd = measured("zero0", 1) + [calls("all_to_all_single", 64, 2)]
    changes = {("zero0", 1, 0): record("zero0", 1, 0, phase=odd)}
    changes.update(
        {
            ("zero3-offload-all", 4, r): record(
                "zero3-offload-all", 4, r, phase=[], status="not_run", reason="RuntimeError: out of memory"
            )
            for r in (0, 1)
        }
    )
    table = tabulate(every_record(changes))
    claims = ClaimVerdicts(
        claim="seed",
        source="docs/claim/claim.md",
        claimed_box=ClaimedBox(
            profile="claim-14b", machine="config/machines/claimed.yaml", machine_name="box"
        ),
        machine="here",
        claims=[
            JudgedClaim(
                id="communication",
                statement="ZeRO-3 is 1.5 x DDP",
                kind="communication",
                on_paper=ClaimVerdict(
                    verdict=HOLDS, evidence="ratio 1.50 (stated 1.5)", source="the ZeRO paper's volumes"
                ),
                measured_here=ClaimVerdict(
                    verdict=DOES_NOT_HOLD, evidence="measured 0.998", source="comms/volume.json"
                ),
            )
        ],
    )
    html = section("communication", table, claims)
    assert html.count("<tr><td><b>") == len(SCHEMES) * 2  # every scheme at both accumulations
    assert "not run</b>: rank 0: RuntimeError: out of memory" in html
    assert "all_to_all_single" in html and "no volume definition" in html
    assert "measured 0.998" in html and "(N-1)/N" in html
    assert section("communication", None, claims) == ""  # a run without a communication table
