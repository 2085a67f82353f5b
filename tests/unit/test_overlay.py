"""The planner's multi-node answer as a profile overlay one can run."""

from pathlib import Path

import pytest
import yaml

from tests.unit.helpers import settings
from tests.unit.test_ledger import claim_counts, claim_setup
from zerogate.config.machines import load_description
from zerogate.contracts.plan import SuggestedSettings, Suggestion
from zerogate.predict.planner import plan as planner_plan
from zerogate.render.overlay import (
    overlay,
    overlay_text,
    profile_stem,
    suggestion_profile,
    with_suggestion_profiles,
)

REPO = Path(__file__).resolve().parents[2]
CLAIM = settings("claim-14b")
TRAINING = CLAIM.training.run  # micro-batch 1 x accumulation 8, the claim's global batch of 16
OVERRIDES = [*CLAIM.deepspeed.overrides, {"path": "steps_per_print", "value": 1, "reason": "profile's"}]


def suggestion(
    change, nodes, ranks, *, checkpointing=False, offload_param=True, micro=1, accumulation=8, seq_len=None
):
    return Suggestion(
        change=change,
        tightest="host RAM",
        need_bytes=1,
        capacity_bytes=2,
        settings=SuggestedSettings(
            nodes=nodes,
            ranks=ranks,
            micro_batch=micro,
            accumulation=accumulation,
            offload_optimizer=True,
            offload_param=offload_param,
            activation_checkpointing=checkpointing,
            seq_len=seq_len,
        ),
    )


@pytest.fixture(scope="module")
def refused_claim():
    """The planner's plan of the claim (ZeRO-3, both offloads, 2 ranks) on the claimed box: refused, host
    RAM."""
    result = planner_plan(
        claim_counts(),
        claim_setup(),
        load_description(REPO / "config/machines/claim-rtx5070-rtx4090.yaml"),
        profile="claim-14b",
    )
    assert result.refused and result.nodes == 1 and result.ranks == 2 and result.scheme == "zero3_offload_all"
    return result


def plan(base, *suggestions, refused=True):
    """``base`` (a real plan) with these suggestions."""
    return base.model_copy(update={"refused": refused, "fits": not refused, "suggestions": list(suggestions)})


def test_a_run_that_does_not_fit_one_node_gets_the_first_multinode_change(refused_claim):
    refused = plan(
        refused_claim,
        suggestion("activation checkpointing", 1, 2, checkpointing=True),
        suggestion("4 ranks (2 nodes like this one)", 2, 4),
        suggestion("all of: ..., 8 ranks", 4, 8, checkpointing=True),
    )
    result = overlay(refused, "claim-14b", TRAINING, OVERRIDES, "box")
    assert result["extends"] == "claim-14b"
    assert result["nodes"] == {"count": 2, "ranks_per_node": 2, "mode": "slurm"}
    # The claim's global batch of 16 kept on 4 ranks: 1 x 4 x 4.
    assert result["training"] == {"gradient_accumulation_steps": 4}
    assert "deepspeed" not in result  # the offloads are the planned run's already
    # Activation checkpointing is a profile key now: a change that needs it is expressed with it.
    checkpointed = plan(refused_claim, suggestion("all of: ..., 8 ranks", 4, 8, checkpointing=True))
    assert overlay(checkpointed, "claim-14b", TRAINING, OVERRIDES, "box")["training"] == {
        "gradient_accumulation_steps": 2,
        "activation_checkpointing": True,
    }


def test_the_planners_own_suggestions_give_an_overlay(refused_claim):
    """On the planner's own suggestions for the claim: the first one on more nodes."""
    expected = next(s for s in refused_claim.suggestions if s.settings.nodes > 1)
    result = overlay(refused_claim, "claim-14b", TRAINING, OVERRIDES, "box")
    assert result["nodes"]["count"] == expected.settings.nodes
    assert result["nodes"]["ranks_per_node"] == expected.settings.ranks // expected.settings.nodes
    assert expected.change in result["description"]


def test_an_offload_change_keeps_the_profiles_own_overrides(refused_claim):
    refused = plan(refused_claim, suggestion("4 ranks, optimizer offload only", 2, 4, offload_param=False))
    overrides = overlay(refused, "p", TRAINING, OVERRIDES, "box")["deepspeed"]["overrides"]
    assert overrides[0] == OVERRIDES[0]
    assert (
        overrides[1]["path"] == "zero_optimization.offload_param.device" and overrides[1]["value"] == "none"
    )


def test_no_overlay_when_the_run_fits_or_no_change_needs_more_nodes(refused_claim):
    assert (
        overlay(
            plan(refused_claim, suggestion("4 ranks", 2, 4), refused=False), "p", TRAINING, OVERRIDES, "box"
        )
        is None
    )
    one_node = plan(refused_claim, suggestion("activation checkpointing", 1, 2, checkpointing=True))
    assert overlay(one_node, "p", TRAINING, OVERRIDES, "box") is None
    fits = plan(refused_claim, refused=False)
    assert overlay_text(None, "p", fits).startswith("# No multi-node overlay for p: the run fits")


def test_the_overlay_text_is_a_loadable_profile_with_its_instructions(refused_claim):
    refused = plan(refused_claim, suggestion("4 ranks (2 nodes like this one)", 2, 4))
    text = overlay_text(overlay(refused, "claim-14b", TRAINING, OVERRIDES, "box"), "claim-14b", refused)
    assert "--workflow-profile profiles/slurm --config profile=claim-14b-2nodes" in text
    assert yaml.safe_load(text)["nodes"]["count"] == 2


def test_a_suggestion_is_a_profile_that_extends_the_planned_one(refused_claim):
    shorter = suggestion(
        "activation checkpointing and sequence length 256 instead of 512",
        1,
        2,
        checkpointing=True,
        seq_len=256,
    )
    result = suggestion_profile(refused_claim, shorter, "claim-14b", TRAINING, OVERRIDES, "box")
    assert result["extends"] == "claim-14b" and "nodes" not in result and "deepspeed" not in result
    assert result["training"] == {"activation_checkpointing": True} and result["dataset"] == {"seq_len": 256}
    assert profile_stem(refused_claim, shorter, "claim-14b", TRAINING) == "claim-14b-checkpointing-seq256"


def test_every_suggestion_is_written_as_a_profile_the_one_command_plans(refused_claim, tmp_path):
    """with_suggestion_profiles writes each suggestion and device change; each file loads as a profile
    (through ``profile=<file>``: its extends resolves in config/profiles) with the change applied."""
    from zerogate.config.profile import check_profile, load_profile_chain, profile_name, resolve_profile

    changes = [
        suggestion("activation checkpointing", 1, 2, checkpointing=True),
        suggestion("sequence length 128 instead of 512", 1, 2, seq_len=128),
    ]
    base = refused_claim.model_copy(update={"device_changes": changes})
    written = with_suggestion_profiles(
        base,
        tmp_path / "suggestions",
        "claim-14b",
        TRAINING,
        OVERRIDES,
        "config/machines/claim-rtx5070-rtx4090.yaml",
    )
    assert len(written.device_changes) == 2 and len(written.suggestions) == len(refused_claim.suggestions)
    for change in [*written.device_changes, *written.suggestions]:
        assert change.command == (
            f"snakemake --cores 1 plan --config profile={change.profile_file} "
            f"machine_description=config/machines/claim-rtx5070-rtx4090.yaml"
        )
        assert Path(change.profile_file).read_text().startswith("# zerogate's planner: ")
    checkpointing, shorter = written.device_changes
    for change, check in (
        (checkpointing, lambda s: s.training.activation_checkpointing),
        (shorter, lambda s: s.dataset.seq_len == 128),
    ):
        chain = load_profile_chain(REPO / "config/profiles", change.profile_file, "test", "profile")
        typed = check_profile(resolve_profile(chain), chain, REPO)
        assert check(typed) and typed.model.hidden_size == 5120  # claim-14b's own model, the change applied
        assert profile_name(change.profile_file) == Path(change.profile_file).stem
