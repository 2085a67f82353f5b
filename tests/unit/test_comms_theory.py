"""zerogate.predict.volume, comms_terms, comms and fsdp2_comms: the volume definition and the theory per
scheme, against hand-worked numbers."""

from __future__ import annotations

import pytest

from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms import TheoryInputs, theory
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP, Term, step_totals, totals
from zerogate.predict.fetch_trace import fetch_units, zero3_gathers, zero3_most_gathered
from zerogate.predict.volume import logged_kind, logged_tensor_bytes, ring_factor, volume_bytes
from zerogate.render.comms_runs import SCHEMES, scheme_for, scheme_setup
from zerogate.render.variants import PEERS, VARIANTS


def counts(*numels: int) -> ModelCounts:
    return ModelCounts(
        total=sum(numels),
        largest_layer=max(numels),
        numels=tuple(numels),
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=False,
    )


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
        assert scheme_setup(scheme) == VARIANTS[PEERS[scheme].config_of if scheme in PEERS else scheme]
    assert scheme_setup("fsdp2") == VARIANTS["zero3"]  # FSDP2 trains from ZeRO-3's config
    assert scheme_setup("zero3-offload-all") == (3, True, True)
    with pytest.raises(KeyError, match="zero9"):
        theory(MODEL, "zero9", TheoryInputs(1, 2, 4, 50))
    # A setup's stage and offloads name their scheme (the floor's way in); offloaded ZeRO-1/2 have a theory
    # too.
    assert scheme_for(3, True, True) == "zero3-offload-all" and scheme_for(0, False, False) == "zero0"
    assert scheme_for(2, True, False) == "zero2-offload"
    assert theory(MODEL, "zero2-offload", TheoryInputs(1, 2, 4, 50)) == theory(
        MODEL, "zero2", TheoryInputs(1, 2, 4, 50)
    )
    with pytest.raises(KeyError, match="stage 0"):
        scheme_for(0, False, True)


def by_name(terms):
    return {t.name: t for t in terms}


def test_ddp_and_zero0_all_reduce_once_per_optimizer_step():
    for scheme in ("ddp", "zero0"):
        terms = theory(MODEL, scheme, TheoryInputs(8, 2, 4, 50))
        assert totals(terms, MICRO_STEP, 2) == (0, 0)
        calls, volume = totals(terms, BOUNDARY, 2)
        assert (calls, volume) == (1, 2 * PHI * 4 * 0.5)
        assert step_totals(terms, 8, 2) == (1, PHI * 4)  # accumulation changes nothing
    # Departures, each named: DDP's buffer broadcast, the gradient norm's scalar all-reduce.
    ddp = by_name(theory(MODEL, "ddp", TheoryInputs(1, 2, 4, 50, buffer_bytes=32)))
    assert ddp["buffer broadcast"].departure and ddp["buffer broadcast"].volume(2) == 16
    zero0 = by_name(theory(MODEL, "zero0", TheoryInputs(1, 2, 4, 50, gradient_clipping=1.0)))
    assert zero0["gradient-norm all-reduce"].volume(2) == 4


def test_ddp_buckets_follow_torchs_assignment():
    # Reverse parameter order; the first bucket closes at 1 MiB, the next ones at 25 MiB (measured on
    # SmolLM2-135M: 16 buckets, the first 3.5 MB).
    mib = 1024 * 1024 // 4  # elements of one MiB in fp32
    big = counts(30 * mib, 20 * mib, 6 * mib, mib // 2, mib // 2)
    assert (
        by_name(theory(big, "ddp", TheoryInputs(1, 2, 4, 0)))["gradient all-reduce"].calls == 3
    )  # [1 MiB], [26 MiB], [30 MiB]
    assert by_name(theory(MODEL, "ddp", TheoryInputs(1, 2, 4, 0)))["gradient all-reduce"].calls == 1


def test_zero1_all_reduces_at_the_boundary_zero2_every_micro_step():
    zero1 = theory(MODEL, "zero1", TheoryInputs(4, 2, 4, 50))
    zero2 = theory(MODEL, "zero2", TheoryInputs(4, 2, 4, 50))
    padded = 1116  # 1115 padded to a multiple of 2
    # DeepSpeed's default multi-rank bucket all-reduce (2 S) replaces the paper's reduce-scatter (S): 3 Phi.
    assert totals(zero1, MICRO_STEP, 2) == (0, 0)
    assert totals(zero1, BOUNDARY, 2) == (1 + 1 + 1, PHI * 4 + padded * 4 * 0.5 + 4)
    assert totals(zero2, MICRO_STEP, 2) == (1, PHI * 4)
    assert step_totals(zero2, 4, 2) == (4 + 1 + 1, 4 * PHI * 4 + padded * 2 + 4)
    paper = [t for t in zero1 if not t.departure]
    assert sum(t.volume(2) for t in paper) == PHI * 4 * 0.5 * 2  # the paper's 2 Phi
    # With the all-reduce off, each slice is reduced to its owner: S per rank, as the paper counts.
    reduce = theory(MODEL, "zero1", TheoryInputs(1, 2, 4, 50, multi_rank_bucket_allreduce=False))
    assert by_name(reduce)["gradient reduced to each owner, not reduce-scattered"].calls == 2
    assert step_totals(reduce, 1, 2)[1] == PHI * 4 * 0.5 + padded * 4 * 0.5 + 4


def test_zero3_gathers_twice_and_reduce_scatters_every_micro_step_for_a_model_over_the_reuse_distance():
    terms = theory(MODEL, "zero3", TheoryInputs(8, 2, 4, 50, max_reuse_distance=10))
    named = by_name(terms)
    assert named["forward parameter all-gather"].tensor_bytes == PHI * 4  # the paper's terms: Phi each
    assert named["backward re-gather"].tensor_bytes == PHI * 4
    assert named["persistent parameters (never released)"].tensor_bytes == -2 * 15 * 4
    assert named["persistent parameters re-gathered after the step"].per == BOUNDARY
    assert named["persistent parameters re-gathered after the step"].calls == 2
    assert named["persistent parameters re-gathered after the step"].tensor_bytes == (10 + 6) * 4
    assert "parameters kept for reuse (no backward re-gather)" not in named
    micro_calls, micro_volume = totals(terms, MICRO_STEP, 2)
    # Sent per micro-step: 1000 + 100 forward and backward, every gradient padded (5 -> 6) reduce-scattered.
    assert micro_volume == (2 * 1100 + 1116) * 4 * 0.5
    # The paper's terms are 3 Phi per micro-step: 1.5 x DDP at accumulation 1, 1.5 G x at accumulation G.
    ddp = step_totals(theory(MODEL, "ddp", TheoryInputs(1, 2, 4, 50)), 1, 2)[1]
    paper = [t for t in terms if not t.departure]
    assert step_totals(paper, 1, 2)[1] == pytest.approx(1.5 * ddp)
    assert step_totals(paper, 8, 2)[1] == pytest.approx(12 * ddp)
    # The last unit of the forward is the first of the backward: never released in between, so even a
    # model far over the reuse distance is not gathered exactly twice.
    last_kept = by_name(theory(counts(1000, 100), "zero3", TheoryInputs(1, 2, 4, 0, max_reuse_distance=10)))
    assert last_kept["parameters kept for reuse (no backward re-gather)"].tensor_bytes == -100 * 4


def test_zero3_keeps_a_model_under_the_reuse_distance_gathered_for_the_backward():
    kept = by_name(
        theory(MODEL, "zero3", TheoryInputs(1, 2, 4, 50))
    )  # DeepSpeed's default distance, 1e9 elements
    assert kept["parameters kept for reuse (no backward re-gather)"].tensor_bytes == -1100 * 4
    assert kept["backward re-gather"].calls == 0
    # Only the parameters far enough from their reuse are gathered again: with a distance of 150 elements
    # the 100-element parameter (reused right after the 10 and 5) stays, the 1000-element one does not.
    gathers = zero3_gathers(MODEL, 2, 50, 150, leaf_blocks=False)
    assert gathers == {"forward": 1100, "backward": 1000, "tied": 0}


def test_the_trace_holds_the_parameters_it_keeps_for_reuse_gathered_at_once():
    # Below the reuse distance both non-persistent parameters (1000, 100) stay gathered from the forward on.
    assert zero3_most_gathered(MODEL, 2, 50, 1_000_000_000, leaf_blocks=False) == 1100
    # Each released after use: at most the largest one at a time.
    assert zero3_most_gathered(MODEL, 2, 50, 10, leaf_blocks=False) == 1000
    # Held N-padded, like the gathers move them: 1000 -> 1002 and 100 -> 102 among 3 ranks.
    assert zero3_most_gathered(MODEL, 3, 50, 1_000_000_000, leaf_blocks=False) == 1104


def test_a_tied_embedding_is_gathered_again_for_the_lm_head():
    tied = ModelCounts(
        total=1000 + 300,
        largest_layer=1000,
        numels=(1000, 100, 100, 100),
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=True,
    )
    # Units: embedding, one layer (100, 100), final norm (100), and the embedding again as the LM head.
    assert fetch_units(tied, leaf_blocks=True) == [(0,), (1, 2), (3,), (0,)]
    gathers = zero3_gathers(tied, 2, 0, 150, leaf_blocks=True)
    assert gathers["tied"] == 1000  # released after the embedding (more than 150 elements before its reuse)
    assert (
        by_name(theory(tied, "zero3", TheoryInputs(1, 2, 4, 0, max_reuse_distance=150)))[
            "tied embedding gathered again for the LM head"
        ].tensor_bytes
        == 4000
    )


def test_offload_sends_the_same_collectives_but_an_fp32_norm():
    def without_norm(terms):
        return [t for t in terms if t.name != "gradient-norm all-reduce"]

    base = theory(MODEL, "zero3", TheoryInputs(2, 2, 4, 50))
    for scheme in ("zero3-offload", "zero3-offload-all"):
        offloaded = theory(MODEL, scheme, TheoryInputs(2, 2, 4, 50))
        assert without_norm(offloaded) == without_norm(base)
        assert by_name(offloaded)["gradient-norm all-reduce"].tensor_bytes == 4  # fp32 on the host
    assert by_name(base)["gradient-norm all-reduce"].tensor_bytes == 8  # fp64 (get_norm_dtype)


def test_term_volume_uses_the_one_definition():
    term = Term("x", "all_gather", MICRO_STEP, 3, 800)
    assert term.volume(4) == volume_bytes("all_gather", 800, 4)
    with pytest.raises(ValueError):
        totals([term], "epoch", 2)


def fsdp2_model() -> ModelCounts:
    """Outside the decoder layers (FSDP2's root): a 5 x 4 embedding and a norm of 4; two layers of a 3 x 4
    weight and a norm of 4 each."""
    return ModelCounts(
        total=56,
        largest_layer=20,
        numels=(20, 12, 4, 12, 4, 4),
        hidden=4,
        layers=2,
        heads=1,
        vocab=5,
        tied_embeddings=True,
        first_dims=(5, 3, 4, 3, 4, 4),
        blocks=(-1, 0, 0, 1, 1, -1),
    )


def test_fsdp2_gathers_each_unit_twice_but_the_root_once_and_reduce_scatters_in_fp32():
    # Padded along the first dimension to a multiple of 2: the embedding 6 x 4 = 24, a layer's weight
    # 4 x 4 = 16; all parameters 68 elements, the layers' 40.
    for dtype_bytes in (4, 2):
        terms = theory(fsdp2_model(), "fsdp2", TheoryInputs(1, 2, dtype_bytes, 0))
        gathers = totals([t for t in terms if t.kind == "all_gather"], MICRO_STEP, 2)
        # Forward: 3 units (root, 2 layers), 68 elements; backward: the 2 layers again, 40 (volumes: S
        # (N-1)/N).
        assert gathers == (5, (68 + 40) * dtype_bytes / 2)
        # Gradients reduce-scattered per unit in fp32 whatever the compute dtype.
        assert totals([t for t in terms if t.kind == "reduce_scatter"], MICRO_STEP, 2) == (3, 68 * 4 / 2)
        # One fp32 local norm per parameter, all-reduced once per optimizer step (2 S (N-1)/N).
        assert totals([t for t in terms if t.kind == "all_reduce"], BOUNDARY, 2) == (1, 6 * 4)
    # The paper's terms, then FSDP2's departures; every micro-step repeats (no sync skipped in accumulation).
    terms = theory(fsdp2_model(), "fsdp2", TheoryInputs(4, 2, 4, 0))
    assert [t.name for t in terms if not t.departure] == [
        "forward parameter all-gather",
        "backward re-gather",
        "gradient reduce-scatter",
    ]
    calls, volume = step_totals(terms, 4, 2)
    assert (calls, volume) == (4 * (5 + 3) + 1, 4 * ((68 + 40) * 4 + 68 * 4) / 2 + 6 * 4)


def test_fsdp2_needs_to_know_each_parameters_layer():
    old = fsdp2_model().model_copy(update={"blocks": (), "first_dims": ()})
    with pytest.raises(ValueError, match="which decoder layer"):
        theory(old, "fsdp2", TheoryInputs(1, 2, 4, 0))
