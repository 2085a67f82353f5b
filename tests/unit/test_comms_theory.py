"""zerogate.plan.comms: the volume definition and the theory per scheme, against hand-worked numbers."""

from __future__ import annotations

import pytest

from zerogate.plan.comms import (BOUNDARY, MICRO_STEP, SCHEMES, Term, logged_kind, logged_tensor_bytes,
                                 ring_factor, scheme_setup, step_totals, theory, totals, volume_bytes)
from zerogate.plan.ledger import ModelCounts
from zerogate.plan.variants import VARIANTS


def counts(*numels: int) -> ModelCounts:
    return ModelCounts(total=sum(numels), largest_layer=max(numels), numels=tuple(numels), hidden=1, layers=1,
                       heads=1, vocab=1, tied_embeddings=False)


# 1000 and 100 elements above a threshold of 50, 10 and 5 at or below it.
MODEL = counts(1000, 100, 10, 5)
PHI = 1115


def test_volume_definition_is_the_zero_papers():
    assert ring_factor(2) == 0.5
    assert ring_factor(4) == 0.75
    assert volume_bytes("all_reduce", 1000, 2) == 1000  # 2 S (N-1)/N
    assert volume_bytes("all_reduce", 1000, 4) == 1500
    assert volume_bytes("all_gather", 1000, 4) == 750
    assert volume_bytes("reduce_scatter", 1000, 4) == 750
    assert volume_bytes("broadcast", 1000, 2) == 500
    assert volume_bytes("barrier", 0, 2) == 0
    assert volume_bytes("all_reduce", 1000, 1) == 0  # alone, a rank sends nothing


def test_unknown_kind_is_never_zero():
    with pytest.raises(KeyError, match="all_to_all"):
        volume_bytes("all_to_all", 1000, 2)
    assert logged_kind("all_to_all_single") is None
    with pytest.raises(KeyError, match="all_to_all_single"):
        logged_tensor_bytes("all_to_all_single", 8, 2)


def test_logged_sizes_become_full_tensors():
    # all_gather_into_tensor logs the rank's input partition; reduce_scatter_tensor the full input.
    assert logged_kind("all_gather_into_tensor") == "all_gather"
    assert logged_tensor_bytes("all_gather_into_tensor", 100, 2) == 200
    assert logged_tensor_bytes("reduce_scatter_tensor", 200, 2) == 200
    assert logged_tensor_bytes("all_reduce", 64, 2) == 64


def test_schemes_reuse_the_variants_table():
    assert SCHEMES[0] == "ddp"
    for scheme in SCHEMES[1:]:
        assert scheme_setup(scheme) == VARIANTS[scheme]
    assert scheme_setup("zero3-offload-all") == (3, True, True)
    with pytest.raises(KeyError, match="zero9"):
        theory(MODEL, "zero9", 1, 2, 4, 50)


def test_ddp_and_zero0_all_reduce_once_per_optimizer_step():
    for scheme in ("ddp", "zero0"):
        terms = theory(MODEL, scheme, 8, 2, 4, 50)
        assert totals(terms, MICRO_STEP, 2) == (0, 0)
        calls, volume = totals(terms, BOUNDARY, 2)
        assert (calls, volume) == (1, 2 * PHI * 4 * 0.5)
        assert step_totals(terms, 8, 2) == (1, PHI * 4)  # accumulation changes nothing


def test_zero1_reduces_at_the_boundary_zero2_every_micro_step():
    zero1 = theory(MODEL, "zero1", 4, 2, 4, 50)
    zero2 = theory(MODEL, "zero2", 4, 2, 4, 50)
    padded = 1116  # 1115 padded to a multiple of 2
    assert totals(zero1, MICRO_STEP, 2) == (0, 0)
    assert totals(zero1, BOUNDARY, 2) == (2 + 1, PHI * 4 * 0.5 + padded * 4 * 0.5)
    assert totals(zero2, MICRO_STEP, 2) == (2, PHI * 4 * 0.5)
    assert step_totals(zero2, 4, 2) == (4 * 2 + 1, 4 * PHI * 2 + padded * 2)
    # At accumulation 1 both equal DDP's 2 Phi (up to the padding), as the paper says.
    ddp_volume = step_totals(theory(MODEL, "ddp", 1, 2, 4, 50), 1, 2)[1]
    assert step_totals(zero1, 1, 2)[1] == pytest.approx(ddp_volume, rel=1e-3)


def test_zero3_gathers_twice_and_reduce_scatters_every_micro_step():
    terms = theory(MODEL, "zero3", 8, 2, 4, 50)
    by_name = {t.name: t for t in terms}
    assert by_name["forward parameter all-gather"].tensor_bytes == (1000 + 100) * 4
    assert by_name["forward parameter all-gather"].calls == 2
    assert by_name["backward re-gather"].tensor_bytes == (1000 + 100) * 4
    assert by_name["gradient reduce-scatter"].tensor_bytes == (1000 + 100 + 10 + 6) * 4  # 5 padded to 6
    assert by_name["persistent parameters"].per == BOUNDARY
    assert by_name["persistent parameters"].tensor_bytes == (10 + 6) * 4
    # 3 Phi per micro-step (paper, 1.5 x DDP) when nothing is persistent:
    no_persistent = theory(counts(1000, 100), "zero3", 1, 2, 4, 0)
    ddp = theory(counts(1000, 100), "ddp", 1, 2, 4, 0)
    assert step_totals(no_persistent, 1, 2)[1] == pytest.approx(1.5 * step_totals(ddp, 1, 2)[1])
    # ... and 1.5 G x with accumulation G.
    assert step_totals(no_persistent, 8, 2)[1] == pytest.approx(12 * step_totals(ddp, 8, 2)[1])


def test_offload_sends_the_same_collectives():
    base = theory(MODEL, "zero3", 2, 2, 4, 50)
    assert theory(MODEL, "zero3-offload", 2, 2, 4, 50) == base
    assert theory(MODEL, "zero3-offload-all", 2, 2, 4, 50) == base


def test_term_volume_uses_the_one_definition():
    term = Term("x", "all_gather", MICRO_STEP, 3, 800)
    assert term.volume(4) == volume_bytes("all_gather", 800, 4)
    with pytest.raises(ValueError):
        totals([term], "epoch", 2)
