"""The planner's answers as profiles you can plan and run: each change the planner found (a suggestion that
would make the run fit, a change that lowers the device need, a change a fitting run can trade for time)
written as a profile that ``extends`` the planned profile, and the one command that plans it (``--config
profile=<the file>``); and, when a run does not fit one node, the first change that fits on more nodes as a
profile overlay (``plan/multinode-overlay.yaml``).

Only changes a profile can express go in: the node count and ranks per node (``nodes``), the micro-batch,
accumulation and activation checkpointing (``training``), the sequence length (``dataset.seq_len``), the
offload devices and their page-locked buffers (``deepspeed.overrides``, the parent's kept: lists replace on
``extends``). The global batch of the planned profile is kept where the new rank count divides it, so the
experiment stays the claim's; where it does not, the profile says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from zerogate.config.training import RunTraining
from zerogate.contracts.plan import Plan, Suggestion

OFFLOAD_PATHS = {
    "offload_optimizer": "zero_optimization.offload_optimizer.device",
    "offload_param": "zero_optimization.offload_param.device",
}
PIN_MEMORY_PATHS = {
    "offload_optimizer": "zero_optimization.offload_optimizer.pin_memory",
    "offload_param": "zero_optimization.offload_param.pin_memory",
}


def multinode_suggestion(plan: Plan) -> Suggestion | None:
    """The first suggestion that needs more nodes than the plan."""
    return next((s for s in plan.suggestions if s.settings.nodes > plan.nodes), None)


def suggestion_profile(
    plan: Plan,
    suggestion: Suggestion,
    profile_name: str,
    training: RunTraining,
    overrides: list[dict[str, Any]],
    machine: str,
) -> dict[str, Any]:
    """``suggestion`` as a profile (a mapping) extending ``profile_name`` as planned on ``machine``;
    ``training`` and ``overrides``: the planned profile's training settings and DeepSpeed overrides."""
    settings = suggestion.settings
    result: dict[str, Any] = {
        "extends": profile_name,
        "description": f"{profile_name} with {suggestion.change}, as zerogate's planner suggested for "
        f"{machine}",
    }
    if settings.nodes > plan.nodes:
        # Slurm: the allocation's nodes become the hostfile at launch (docs/cluster.md).
        result["nodes"] = {
            "count": settings.nodes,
            "ranks_per_node": settings.ranks // settings.nodes,
            "mode": "slurm",
        }
    changed: dict[str, Any] = {}
    micro = settings.micro_batch
    if micro != training.micro_batch_per_rank:
        changed["micro_batch_per_rank"] = micro
    batch = training.train_batch_size
    if batch and batch % (micro * settings.ranks) == 0:
        accumulation = batch // (micro * settings.ranks)
    else:
        accumulation = settings.accumulation
        if batch:
            changed["train_batch_size"] = micro * accumulation * settings.ranks
    if accumulation != training.gradient_accumulation_steps:
        changed["gradient_accumulation_steps"] = accumulation
    if settings.activation_checkpointing != training.activation_checkpointing:
        changed["activation_checkpointing"] = settings.activation_checkpointing
    if changed:
        result["training"] = changed
    if settings.seq_len is not None:
        result["dataset"] = {"seq_len": settings.seq_len}
    changes = [
        {
            "path": path,
            "value": "cpu" if getattr(settings, key) else "none",
            "reason": f"zerogate's planner: {suggestion.change}",
        }
        for key, path in OFFLOAD_PATHS.items()
        if getattr(settings, key) != plan_offload(plan, key)
    ]
    if settings.pin_memory is not None:
        changes += [
            {
                "path": path,
                "value": settings.pin_memory,
                "reason": f"zerogate's planner: {suggestion.change}",
            }
            for key, path in PIN_MEMORY_PATHS.items()
            if getattr(settings, key)
        ]
    if changes:
        result["deepspeed"] = {"overrides": [*overrides, *changes]}
    return result


def overlay(
    plan: Plan, profile_name: str, training: RunTraining, overrides: list[dict[str, Any]], machine: str
) -> dict[str, Any] | None:
    """The multi-node overlay profile (a mapping) for ``profile_name`` planned on ``machine``; None when the
    run fits or no change on more nodes fits."""
    if not plan.refused:
        return None
    suggestion = multinode_suggestion(plan)
    if suggestion is None:
        return None
    result = suggestion_profile(plan, suggestion, profile_name, training, overrides, machine)
    result["description"] = (
        f"{profile_name} on {suggestion.settings.nodes} nodes like {machine} ({suggestion.change}), "
        f"as zerogate's planner suggested"
    )
    return result


def profile_stem(plan: Plan, suggestion: Suggestion, profile_name: str, training: RunTraining) -> str:
    """A file name for the suggestion's profile: the planned profile's and what the change sets."""
    settings = suggestion.settings
    parts = [profile_name]
    if settings.nodes > plan.nodes:
        parts.append(f"{settings.nodes}nodes")
    if settings.offload_param and not plan_offload(plan, "offload_param"):
        parts.append("offload-all")
    elif settings.offload_optimizer and not plan_offload(plan, "offload_optimizer"):
        parts.append("offload-optimizer")
    elif not settings.offload_optimizer and plan_offload(plan, "offload_optimizer"):
        parts.append("no-offload")
    elif not settings.offload_param and plan_offload(plan, "offload_param"):
        parts.append("no-param-offload")
    if settings.pin_memory is not None:
        parts.append("pinned" if settings.pin_memory else "pageable")
    if settings.activation_checkpointing and not training.activation_checkpointing:
        parts.append("checkpointing")
    if settings.seq_len is not None:
        parts.append(f"seq{settings.seq_len}")
    if settings.micro_batch != training.micro_batch_per_rank:
        parts.append(f"micro{settings.micro_batch}")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts))


def plan_command(profile_file: str | Path, machine_description: str | None) -> str:
    """The one command that plans a profile file (``--config profile=`` takes a .yaml path)."""
    described = f" machine_description={machine_description}" if machine_description else ""
    return f"snakemake --cores 1 plan --config profile={profile_file}{described}"


def with_suggestion_profiles(
    plan: Plan,
    directory: str | Path,
    profile_name: str,
    training: RunTraining,
    overrides: list[dict[str, Any]],
    machine_description: str | None,
    stem: str | None = None,
) -> Plan:
    """``plan`` with every suggestion, device change and time change written as a profile in ``directory``
    (one YAML file each, made here) and its ``profile_file`` and ``command`` set. ``profile_name``: the
    planned profile as ``extends`` names it (a name, or a .yaml path); ``stem``: the name the files start with
    (its results name). A change no profile can express (ranks bound to cores, a flag of DeepSpeed's launcher
    the pipeline does not pass) is left without a file or command."""
    stem = stem or profile_name
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)

    def written(suggestion: Suggestion) -> Suggestion:
        if suggestion.settings.bind_cores is not None:
            return suggestion
        profile = suggestion_profile(plan, suggestion, profile_name, training, overrides, plan.machine)
        file = out / f"{profile_stem(plan, suggestion, stem, training)}.yaml"
        head = (
            f"# zerogate's planner: {suggestion.change} (for {plan.machine}). Plan it:\n"
            f"#   {plan_command(file, machine_description)}\n"
        )
        file.write_text(head + yaml.safe_dump(profile, sort_keys=False))
        return suggestion.model_copy(
            update={"profile_file": str(file), "command": plan_command(file, machine_description)}
        )

    return plan.model_copy(
        update={
            "suggestions": [written(s) for s in plan.suggestions],
            "device_changes": [written(s) for s in plan.device_changes],
            "time_changes": [written(s) for s in plan.time_changes],
        }
    )


def plan_offload(plan: Plan, key: str) -> bool:
    """Whether the planned run offloads (``offload_optimizer`` or ``offload_param``), from its scheme."""
    return plan.scheme == "zero3_offload_all" or (key == "offload_optimizer" and "offload" in plan.scheme)


def overlay_text(result: dict[str, Any] | None, profile_name: str, plan: Plan) -> str:
    """The overlay as YAML with how to run it, or a comment saying why there is none."""
    if result is None:
        why = (
            "the run fits this machine"
            if not plan.refused
            else "no change the planner tried fits on more nodes in a form a profile can express"
        )
        return f"# No multi-node overlay for {profile_name}: {why}.\n"
    name = f"{profile_name}-{result['nodes']['count']}nodes"
    check = plan.deciding_check
    head = (
        f"# zerogate's planner: {profile_name} does not fit one node ({check.device}: {check.what}).\n"
        f"# A ready profile for {result['nodes']['count']} nodes. Copy it to config/profiles/{name}.yaml, "
        "then on a\n"
        f"# Slurm cluster (docs/cluster.md):\n"
        f"#   snakemake --workflow-profile profiles/slurm --config profile={name} machine=<cluster>\n"
        "# and give the train rule its nodes there (set-resources: train: nodes: "
        f"{result['nodes']['count']}).\n"
    )
    return head + yaml.safe_dump(result, sort_keys=False)
