"""The planner's answer as a profile you can run: when a run does not fit one node, the first change the
planner found that fits on more nodes, written as a profile overlay (``extends`` the planned profile).

Only changes a profile can express go in: the node count and ranks per node (``nodes``), the micro-batch
(``training``) and the offload devices (``deepspeed.overrides``, the parent's kept: lists replace on
``extends``). The global batch of the planned profile is kept where the new rank count divides it, so the
experiment stays the claim's; where it does not, the overlay says so.
"""

from __future__ import annotations

from typing import Any

import yaml

from zerogate.config.settings import RunTraining
from zerogate.contracts.plan import Plan, Suggestion

OFFLOAD_PATHS = {"offload_optimizer": "zero_optimization.offload_optimizer.device",
                 "offload_param": "zero_optimization.offload_param.device"}


def multinode_suggestion(plan: Plan, expressible_checkpointing: bool = False) -> Suggestion | None:
    """The first suggestion that needs more nodes than the plan and that a profile can express."""
    for suggestion in plan.suggestions:
        if suggestion.settings.nodes <= plan.nodes:
            continue
        if suggestion.settings.activation_checkpointing and not expressible_checkpointing:
            continue  # the profile schema has no activation-checkpointing switch yet
        return suggestion
    return None


def overlay(plan: Plan, profile_name: str, training: RunTraining, overrides: list[dict[str, Any]],
            machine: str) -> dict[str, Any] | None:
    """The overlay profile (a mapping) for ``profile_name`` planned on ``machine``; None when the run fits
    or no multi-node change a profile can express fits. ``training`` and ``overrides``: the planned
    profile's training settings and DeepSpeed overrides."""
    if not plan.refused:
        return None
    suggestion = multinode_suggestion(plan)
    if suggestion is None:
        return None
    settings = suggestion.settings
    nodes = settings.nodes
    ranks_per_node = settings.ranks // nodes
    result: dict[str, Any] = {
        "extends": profile_name,
        "description": f"{profile_name} on {nodes} nodes like {machine} ({suggestion.change}), as zerogate's "
                       f"planner suggested",
        # Slurm: the allocation's nodes become the hostfile at launch (docs/cluster.md).
        "nodes": {"count": nodes, "ranks_per_node": ranks_per_node, "mode": "slurm"},
    }
    batch = training.train_batch_size
    changed: dict[str, Any] = {}
    micro = settings.micro_batch
    if micro != training.micro_batch_per_rank:
        changed["micro_batch_per_rank"] = micro
    if batch and batch % (micro * settings.ranks) == 0:
        changed["gradient_accumulation_steps"] = batch // (micro * settings.ranks)
    elif batch:
        changed["train_batch_size"] = micro * settings.accumulation * settings.ranks
    if changed:
        result["training"] = changed
    changes = [{"path": path, "value": "cpu" if getattr(settings, key) else "none",
                "reason": f"zerogate's planner: {suggestion.change}"}
               for key, path in OFFLOAD_PATHS.items() if getattr(settings, key) != plan_offload(plan, key)]
    if changes:
        result["deepspeed"] = {"overrides": [*overrides, *changes]}
    return result


def plan_offload(plan: Plan, key: str) -> bool:
    """Whether the planned run offloads (``offload_optimizer`` or ``offload_param``), from its scheme."""
    return plan.scheme == "zero3_offload_all" or (key == "offload_optimizer" and "offload" in plan.scheme)


def overlay_text(result: dict[str, Any] | None, profile_name: str, plan: Plan) -> str:
    """The overlay as YAML with how to run it, or a comment saying why there is none."""
    if result is None:
        why = ("the run fits this machine" if not plan.refused
               else "no change the planner tried fits on more nodes in a form a profile can express")
        return f"# No multi-node overlay for {profile_name}: {why}.\n"
    name = f"{profile_name}-{result['nodes']['count']}nodes"
    check = plan.deciding_check
    head = (f"# zerogate's planner: {profile_name} does not fit one node ({check.device}: {check.what}).\n"
            f"# A ready profile for {result['nodes']['count']} nodes. Copy it to config/profiles/{name}.yaml, then on a\n"
            f"# Slurm cluster (docs/cluster.md):\n"
            f"#   snakemake --workflow-profile profiles/slurm --config profile={name} machine=<cluster>\n"
            f"# and give the train rule its nodes there (set-resources: train: nodes: {result['nodes']['count']}).\n")
    return head + yaml.safe_dump(result, sort_keys=False)
