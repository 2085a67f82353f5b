"""The profile's sections that say how the run is set up and launched: ``deepspeed`` (the claim's config and
the profile's changes to it), ``plan`` (train although the planner refuses), ``preflight`` (what the machine
must have), ``nodes`` (several nodes) and ``variants`` (the comparison runs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from zerogate.config.base import AsWritten, Bool, Int, Number, OptionalNumber, Settings, Str, Unique, setting


class OverrideSpec(Settings):
    """One of ``deepspeed.overrides``: a change to the claim's DeepSpeed config, recorded as a deviation with
    its reason."""

    path: Str = setting("dotted key in the DeepSpeed config", pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
    value: Any = setting("the value the key takes")
    reason: Str = setting("why (recorded with the deviation)", min_length=1)


class DeepSpeedSettings(Settings):
    """``deepspeed``: the claim's config and the profile's changes to it."""

    template: Str = setting("path of the claim's DeepSpeed config, relative to the repository")
    overrides: list[Annotated[dict[str, Any], AsWritten(OverrideSpec)]] = setting(
        "{path, value, reason} each: a change to the claim's config, with why", factory=list, stated=True
    )


class PlanSettings(Settings):
    """``plan``: train although the planner says the run does not fit, with the reason (a deviation)."""

    allow_infeasible: Bool = setting("train anyway when the plan does not fit", False, stated=True)
    reason: Str = setting("why (recorded as a deviation)", "", stated=True, schema={"minLength": 1})


class PreflightSettings(Settings):
    """``preflight``: what the machine must have, checked before any model is loaded
    (zerogate.predict.preflight)."""

    accelerator: Literal["any", "cpu", "cuda"] | None = setting("the accelerator the run needs", None)
    min_devices: Int | None = setting("devices the run needs at least", None, ge=1)
    min_device_memory_GiB: OptionalNumber = setting("memory each device needs at least, GiB", None, ge=0)
    min_host_memory_GiB: OptionalNumber = setting("host memory the run needs at least, GiB", None, ge=0)
    basis: Str | None = setting("where the figures come from", None)


class NodesSettings(Settings):
    """``nodes``: several nodes through DeepSpeed's multi-node launcher (zerogate.runtime.nodes;
    docs/cluster.md); absent: one node. World size = nodes x ranks_per_node."""

    hostfile: Str | None = setting(
        "DeepSpeed hostfile (one '<host> slots=<n>' line per node), relative to the repository; node rank = "
        "line order. Optional with mode slurm: then the allocation's node list is the hostfile",
        None,
    )
    count: Int | None = setting("nodes; checked against the hostfile and the Slurm allocation", None, ge=1)
    ranks_per_node: Int = setting("ranks (devices) used on each node", 1, filled=True, ge=1)
    mode: Literal["no_ssh", "slurm"] = setting(
        "no_ssh - one 'deepspeed --no_ssh --node_rank i' per node (this machine starts those of its own "
        "names); slurm - inside a Slurm allocation, DeepSpeed's slurm launcher backend starts every rank "
        "with srun",
        "no_ssh",
        filled=True,
    )
    master_addr: Str = setting("rendezvous address (node 0's)", "127.0.0.1", filled=True)
    master_port: Int | None = setting(
        "rendezvous port; set it when other machines' launchers are started by hand (no_ssh across "
        "machines), which must know it. Absent: a free port of this machine, chosen per launch",
        None,
        ge=1024,
        le=65535,
    )
    collective_timeout_s: Number = setting(
        "how long a rank waits in a collective for a peer before it fails the run (a dead node ends the run "
        "within this time instead of hanging; the rerun resumes from the last checkpoint)",
        300,
        filled=True,
        ge=10,
    )


# Every variant a profile may list (zerogate.render.variants.ALL_VARIANTS, in its order; a unit test holds
# the two lists equal): ZeRO's stages and offloads, and ZeRO's peers.
VARIANT_NAMES = (
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero1-offload",
    "zero2-offload",
    "zero3-offload",
    "zero3-offload-all",
    "fsdp2",
    "fsdp2-offload",
    "hf-trainer",
)
VariantName = Literal[VARIANT_NAMES]  # type: ignore[valid-type]
Variants = Annotated[list[VariantName], Unique()]
