"""The run's world as rendered beside its DeepSpeed config: how many ranks, each rank's thread pools, and
the nodes they run on (the run spec's ``world_size``, ``env`` and ``nodes``)."""

from __future__ import annotations

from typing import Any

from zerogate.config.machines import MachineDescription, to_fingerprint
from zerogate.config.training import RunTraining
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import NodesSpec
from zerogate.errors import InputError
from zerogate.runtime.nodes import NodeLayout, ranks_on_this_machine


def thread_env(threads_per_rank: int) -> dict[str, str]:
    """Thread-pool sizes for each rank. All of them: Snakemake sets each to the job's thread count, and
    ranks x threads > cores thrashes (measured with 2 ranks on 2 cores, 0.44 s per optimizer step at one
    thread per rank; 2.5 s with OMP_NUM_THREADS=2, 2.0 s with only MKL_NUM_THREADS=2)."""
    names = (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "GOTO_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    )
    return {name: str(threads_per_rank) for name in names}


def world_size(training: RunTraining, fingerprint: Fingerprint, nodes: NodeLayout | None = None) -> int:
    """Several nodes: nodes x ranks per node. One node: one rank per GPU; without GPUs, the profile's
    cpu_ranks."""
    if nodes is not None and nodes.multi_node:
        return nodes.world_size
    accelerator = fingerprint.accelerator
    return accelerator.count if accelerator.kind == "cuda" else training.cpu_ranks


def check_batch(training: RunTraining, ranks: int, file: str) -> None:
    """A stated global batch (``training.train_batch_size``) must be the geometry's, micro-batch x
    accumulation x ``ranks`` (DeepSpeed refuses any other, deepspeed/runtime/config.py
    ``_batch_assertion``); InputError naming ``file``, the profile file that sets it."""
    micro, accumulation = training.micro_batch_per_rank, training.gradient_accumulation_steps
    wanted = training.train_batch_size
    if wanted is not None and wanted != micro * accumulation * ranks:
        raise InputError(
            file,
            "training.train_batch_size",
            f"{wanted} != micro_batch_per_rank {micro} x gradient_accumulation_steps {accumulation} x "
            f"{ranks} ranks",
        )


def check_described_world(
    training: RunTraining, machine: MachineDescription, nodes_section: dict[str, Any] | None, batch_file: str
) -> None:
    """The profile's global batch against a described machine's ranks, checked when the workflow loads
    (``batch_file``: the profile file that sets ``training.train_batch_size``). One node only: the ranks
    of several come from the profile's hostfile, which the rendering reads and checks (DeepSpeed's
    parser)."""
    if not nodes_section:
        check_batch(training, world_size(training, to_fingerprint(machine)), batch_file)


def threads_per_rank(cores: int, ranks: int, nodes: NodeLayout) -> int:
    """Each rank's share of this machine's cores, among the ranks that share them
    (zerogate.runtime.nodes.ranks_on_this_machine)."""
    return max(1, cores // ranks_on_this_machine(ranks, nodes))


def nodes_spec(nodes: NodeLayout, section: dict[str, Any] | None, profile_file: str) -> NodesSpec | None:
    """The run spec's ``nodes``: the layout as rendered, and the profile's section, which the launcher
    lays out again inside a Slurm allocation (where the hosts become known)."""
    if not nodes.multi_node:
        return None
    return NodesSpec(
        mode=nodes.mode,
        hosts=list(nodes.hosts),
        ranks_per_node=nodes.ranks_per_node,
        master_addr=nodes.master_addr,
        collective_timeout_s=nodes.collective_timeout_s,
        section=section,
        profile_file=profile_file,
    )
