"""The planner's multi-node answer as a profile overlay one can run (issue 13)."""

import yaml

from zerogate.plan.overlay import overlay, overlay_text

PROFILE = {"training": {"micro_batch_per_rank": 1, "gradient_accumulation_steps": 8, "train_batch_size": 16},
           "deepspeed": {"overrides": [{"path": "steps_per_print", "value": 1, "reason": "profile's"}]}}


def suggestion(change, nodes, ranks, *, checkpointing=False, offload_param=True, micro=1, accumulation=8):
    return {"change": change, "settings": {"nodes": nodes, "ranks": ranks, "micro_batch": micro,
                                           "accumulation": accumulation, "offload_optimizer": True,
                                           "offload_param": offload_param, "activation_checkpointing": checkpointing}}


def plan(*suggestions, refused=True):
    return {"refused": refused, "nodes": 1, "ranks": 2, "scheme": "zero3_offload_all", "suggestions": list(suggestions),
            "deciding_check": {"device": "host (all ranks of the node)", "what": "host RAM"}}


def test_a_run_that_does_not_fit_one_node_gets_the_first_expressible_multinode_change():
    refused = plan(suggestion("activation checkpointing", 1, 2, checkpointing=True),
                   suggestion("all of: ..., 4 ranks", 2, 4, checkpointing=True),
                   suggestion("4 ranks (2 nodes like this one)", 2, 4),
                   suggestion("8 ranks (4 nodes like this one)", 4, 8))
    result = overlay(refused, "claim-14b", PROFILE, "box")
    assert result["extends"] == "claim-14b"
    assert result["nodes"] == {"count": 2, "ranks_per_node": 2, "mode": "slurm"}
    # The claim's global batch of 16 kept on 4 ranks: 1 x 4 x 4.
    assert result["training"] == {"gradient_accumulation_steps": 4}
    assert "deepspeed" not in result  # the offloads are the planned run's already


def test_an_offload_change_keeps_the_profiles_own_overrides():
    refused = plan(suggestion("4 ranks, optimizer offload only", 2, 4, offload_param=False))
    refused["scheme"] = "zero3_offload_all"
    overrides = overlay(refused, "p", PROFILE, "box")["deepspeed"]["overrides"]
    assert overrides[0] == PROFILE["deepspeed"]["overrides"][0]
    assert overrides[1]["path"] == "zero_optimization.offload_param.device" and overrides[1]["value"] == "none"


def test_no_overlay_when_the_run_fits_or_nothing_expressible_fits():
    assert overlay(plan(suggestion("4 ranks", 2, 4), refused=False), "p", PROFILE, "box") is None
    only_checkpointing = plan(suggestion("all of: ..., 4 ranks", 2, 4, checkpointing=True))
    assert overlay(only_checkpointing, "p", PROFILE, "box") is None
    assert overlay_text(None, "p", plan(refused=False)).startswith("# No multi-node overlay for p: the run fits")


def test_the_overlay_text_is_a_loadable_profile_with_its_instructions():
    refused = plan(suggestion("4 ranks (2 nodes like this one)", 2, 4))
    text = overlay_text(overlay(refused, "claim-14b", PROFILE, "box"), "claim-14b", refused)
    assert "--workflow-profile profiles/slurm --config profile=claim-14b-2nodes" in text
    assert yaml.safe_load(text)["nodes"]["count"] == 2
