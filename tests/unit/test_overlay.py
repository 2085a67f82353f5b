"""The planner's multi-node answer as a profile overlay one can run."""

from pathlib import Path

import pytest
import yaml

from tests.unit.helpers import settings
from tests.unit.test_ledger import claim_setup, oracle_counts
from zerogate.config.machines import load_description
from zerogate.contracts.plan import SuggestedSettings, Suggestion
from zerogate.plan.overlay import overlay, overlay_text
from zerogate.plan.planner import plan as planner_plan

REPO = Path(__file__).resolve().parents[2]
CLAIM = settings("claim-14b")
TRAINING = CLAIM.training.run  # micro-batch 1 x accumulation 8, the claim's global batch of 16
OVERRIDES = [*CLAIM.deepspeed.overrides, {"path": "steps_per_print", "value": 1, "reason": "profile's"}]


def suggestion(change, nodes, ranks, *, checkpointing=False, offload_param=True, micro=1, accumulation=8):
    return Suggestion(change=change, tightest="host RAM", need_bytes=1, capacity_bytes=2, settings=SuggestedSettings(
        nodes=nodes, ranks=ranks, micro_batch=micro, accumulation=accumulation, offload_optimizer=True,
        offload_param=offload_param, activation_checkpointing=checkpointing))


@pytest.fixture(scope="module")
def refused_claim():
    """The planner's plan of the claim (ZeRO-3, both offloads, 2 ranks) on the claimed box: refused, host RAM."""
    result = planner_plan(oracle_counts(), claim_setup(), load_description(REPO / "config/machines/claim-rtx5070-rtx4090.yaml"),
                          profile="claim-14b")
    assert result.refused and result.nodes == 1 and result.ranks == 2 and result.scheme == "zero3_offload_all"
    return result


def plan(base, *suggestions, refused=True):
    """``base`` (a real plan) with these suggestions."""
    return base.model_copy(update={"refused": refused, "fits": not refused, "suggestions": list(suggestions)})


def test_a_run_that_does_not_fit_one_node_gets_the_first_expressible_multinode_change(refused_claim):
    refused = plan(refused_claim,
                   suggestion("activation checkpointing", 1, 2, checkpointing=True),
                   suggestion("all of: ..., 4 ranks", 2, 4, checkpointing=True),
                   suggestion("4 ranks (2 nodes like this one)", 2, 4),
                   suggestion("8 ranks (4 nodes like this one)", 4, 8))
    result = overlay(refused, "claim-14b", TRAINING, OVERRIDES, "box")
    assert result["extends"] == "claim-14b"
    assert result["nodes"] == {"count": 2, "ranks_per_node": 2, "mode": "slurm"}
    # The claim's global batch of 16 kept on 4 ranks: 1 x 4 x 4.
    assert result["training"] == {"gradient_accumulation_steps": 4}
    assert "deepspeed" not in result  # the offloads are the planned run's already


def test_the_planners_own_suggestions_give_an_overlay(refused_claim):
    """On the planner's own suggestions for the claim: the first one on more nodes without activation
    checkpointing (which a profile cannot express)."""
    expected = next(s for s in refused_claim.suggestions
                    if s.settings.nodes > 1 and not s.settings.activation_checkpointing)
    result = overlay(refused_claim, "claim-14b", TRAINING, OVERRIDES, "box")
    assert result["nodes"]["count"] == expected.settings.nodes
    assert result["nodes"]["ranks_per_node"] == expected.settings.ranks // expected.settings.nodes
    assert expected.change in result["description"]


def test_an_offload_change_keeps_the_profiles_own_overrides(refused_claim):
    refused = plan(refused_claim, suggestion("4 ranks, optimizer offload only", 2, 4, offload_param=False))
    overrides = overlay(refused, "p", TRAINING, OVERRIDES, "box")["deepspeed"]["overrides"]
    assert overrides[0] == OVERRIDES[0]
    assert overrides[1]["path"] == "zero_optimization.offload_param.device" and overrides[1]["value"] == "none"


def test_no_overlay_when_the_run_fits_or_nothing_expressible_fits(refused_claim):
    assert overlay(plan(refused_claim, suggestion("4 ranks", 2, 4), refused=False), "p", TRAINING, OVERRIDES, "box") is None
    only_checkpointing = plan(refused_claim, suggestion("all of: ..., 4 ranks", 2, 4, checkpointing=True))
    assert overlay(only_checkpointing, "p", TRAINING, OVERRIDES, "box") is None
    fits = plan(refused_claim, refused=False)
    assert overlay_text(None, "p", fits).startswith("# No multi-node overlay for p: the run fits")


def test_the_overlay_text_is_a_loadable_profile_with_its_instructions(refused_claim):
    refused = plan(refused_claim, suggestion("4 ranks (2 nodes like this one)", 2, 4))
    text = overlay_text(overlay(refused, "claim-14b", TRAINING, OVERRIDES, "box"), "claim-14b", refused)
    assert "--workflow-profile profiles/slurm --config profile=claim-14b-2nodes" in text
    assert yaml.safe_load(text)["nodes"]["count"] == 2
