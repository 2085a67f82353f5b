"""The run's world as rendered beside its DeepSpeed config: how many ranks, each rank's thread pools, and
the nodes they run on (the run spec's ``world_size``, ``env`` and ``nodes``)."""

from __future__ import annotations

from typing import Any

from zerogate.config.training import RunTraining
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import NodesSpec
from zerogate.runtime.nodes import NodeLayout, local_nodes


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


def threads_per_rank(cores: int, ranks: int, nodes: NodeLayout) -> int:
    """Each rank's share of this machine's cores. The ranks that share them: all of them on one node; on
    several, those of the nodes that are this machine (two local nodes in the tests, one on a real
    cluster)."""
    return max(1, cores // (nodes.ranks_per_node * local_nodes(nodes) if nodes.multi_node else ranks))


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
