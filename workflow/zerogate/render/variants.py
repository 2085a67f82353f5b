"""Comparison runs on the same model and data: ZeRO stage 0 (DDP), 1, 2, 3, with and without offload, and
ZeRO's peers (PEERS): torch FSDP2, with and without its CPU offload, and transformers' Trainer.

Each variant is the rendered DeepSpeed config (zerogate.render.ds_config.render: the claim under the profile)
with the stage and offload devices overridden, so everything else -- batch geometry, optimizer, LR
schedule, precision -- stays the same across variants and the ledger can be checked stage by stage. A peer
trains with another engine from the config of the ZeRO variant it stands beside (the optimizer, schedule,
clipping and precision are read from it; FSDP2's offload from its parameter offload device).
Their comparison table (statistics of the trained variants) is zerogate.analysis.variants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerogate.render.overrides import MISSING, apply_overrides, get_path

# name -> (stage, optimizer offload, parameter offload). Parameter offload exists only in stage 3.
VARIANTS: dict[str, tuple[int, bool, bool]] = {
    "zero0": (0, False, False),
    "zero1": (1, False, False),
    "zero2": (2, False, False),
    "zero3": (3, False, False),
    "zero1-offload": (1, True, False),
    "zero2-offload": (2, True, False),
    "zero3-offload": (3, True, False),
    "zero3-offload-all": (3, True, True),  # the claim's configuration
}


@dataclass(frozen=True)
class Peer:
    """A peer of ZeRO: what trains it (a zerogate.runtime.engines name, given to the training loop as
    ``--engine``), the ZeRO variant whose rendered config it reads, and what it is."""

    engine: str
    config_of: str  # a VARIANTS name
    what: str


PEERS: dict[str, Peer] = {
    "fsdp2": Peer(
        "fsdp2",
        "zero3",
        "torch FSDP2 (fully_shard): parameters, gradients and optimizer state sharded, as ZeRO-3",
    ),
    "fsdp2-offload": Peer(
        "fsdp2",
        "zero3-offload-all",
        "torch FSDP2 with CPUOffloadPolicy: parameters, gradients "
        "and the optimizer step on the host, as ZeRO-3 with both offloads",
    ),
}


@dataclass(frozen=True)
class NotRunnable:
    """A peer a profile may list that this pipeline does not train: the ZeRO variant whose config it would
    take, what it is, and why it does not run (on the CPU accelerator: the cause found by trying it)."""

    config_of: str
    what: str
    on_cpu: str
    elsewhere: str

    def reason(self, accelerator: str) -> str:
        return self.on_cpu if accelerator == "cpu" else self.elsewhere


NOT_RUNNABLE: dict[str, NotRunnable] = {
    "hf-trainer": NotRunnable(
        "zero3-offload-all",
        "transformers.Trainer with the run's rendered DeepSpeed config",
        on_cpu=(
            "cannot run on DeepSpeed's CPU accelerator (found with transformers 5.23.0, accelerate 1.15.0, "
            "deepspeed 0.19.8): TrainingArguments builds accelerate's PartialState, whose _prepare_backend "
            "(accelerate/state.py) picks a process-group backend only for an accelerator device (CUDA, XPU, "
            "NPU, "
            "HPU, MLU, MUSA, SDAA, Neuron) or, with use_cpu=True, gloo; without use_cpu it initialises "
            "DeepSpeed's two-rank group but, its backend None, sets num_processes=1 and process_index=0 on "
            "every rank. The Trainer then computes train_batch_size for one rank (micro-batch x "
            "accumulation) and "
            "refuses the rendered config's (x 2 ranks); with train_batch_size 'auto' DeepSpeed's own batch "
            "check "
            "fails (micro-batch x accumulation != micro-batch x accumulation x 2), and every rank would read "
            "the "
            "same samples"
        ),
        elsewhere=(
            "not run: this pipeline has no Trainer worker (the Trainer's loop is not the one loop, "
            "zerogate.runtime.loop, that every other variant's records come from)"
        ),
    ),
}

# Every variant a profile may list, in the order tables show them.
ALL_VARIANTS = (*VARIANTS, *PEERS, *NOT_RUNNABLE)


def engine_of(name: str) -> str:
    """What trains variant ``name``: DeepSpeed, or a peer's engine."""
    if name in NOT_RUNNABLE:
        return name
    return PEERS[name].engine if name in PEERS else "deepspeed"


def what_of(name: str) -> str:
    """Variant ``name`` in words."""
    if name in PEERS:
        return PEERS[name].what
    if name in NOT_RUNNABLE:
        return NOT_RUNNABLE[name].what
    stage, offload_optimizer, offload_param = VARIANTS[name]
    offloads = [kind for kind, on in (("optimizer", offload_optimizer), ("parameters", offload_param)) if on]
    return f"DeepSpeed ZeRO-{stage}" + (
        f", {' and '.join(offloads)} offloaded to the host" if offloads else ""
    )


def trained(names: list[str]) -> list[str]:
    """The variants of ``names`` this pipeline trains (the rest are NOT_RUNNABLE)."""
    return [name for name in names if name not in NOT_RUNNABLE]


def zero_setup(name: str) -> tuple[int, bool, bool]:
    """(ZeRO stage, optimizer offload, parameter offload) of variant ``name``'s config (a peer: the config
    it reads)."""
    config_of = (
        PEERS[name].config_of
        if name in PEERS
        else NOT_RUNNABLE[name].config_of
        if name in NOT_RUNNABLE
        else name
    )
    return VARIANTS[config_of]


def variant_overrides(name: str) -> list[dict[str, Any]]:
    stage, offload_optimizer, offload_param = zero_setup(name)
    return [
        {"path": "zero_optimization.stage", "value": stage, "reason": f"variant {name}"},
        {
            "path": "zero_optimization.offload_optimizer.device",
            "value": "cpu" if offload_optimizer else "none",
            "reason": f"variant {name}",
        },
        {
            "path": "zero_optimization.offload_param.device",
            "value": "cpu" if offload_param else "none",
            "reason": f"variant {name}",
        },
    ]


def variant_config(ds_config: dict[str, Any], name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the variant's DeepSpeed config, its overrides with the rendered value each replaced)."""
    overrides = variant_overrides(name)
    applied = []
    for override in overrides:
        before = get_path(ds_config, override["path"])
        applied.append({**override, "before": None if before is MISSING else before})
    return apply_overrides(ds_config, overrides), applied


# The rows of the peers' benchmark (zerogate.bench.peers_vs_zero3), in order: ZeRO-3 first (every ratio's
# reference), the peers beside the ZeRO-3 configs they read, and ZeRO-1 and -2 for the loss tolerance.
PEERS_BENCHMARK = ("zero3", "zero3-offload-all", "fsdp2", "fsdp2-offload", "zero2", "zero1")
