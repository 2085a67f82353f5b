"""What one NCCL collective costs before its first byte, per call, on a box whose description gives no
latency: NCCL's own model of it, the one its tuner picks an algorithm and protocol with.

NCCL 2.30.7 (https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/
tuning.cc: ``ncclTunerConstantsDefaults`` and ``ncclTopoTuneModel``), a ring inside one node: the
protocol's base latency plus, per ring step, the latency of one hop over the link the ring takes (NVLink, or
PCI for peer-to-peer and for copies through host memory alike: ``intraHw`` is NVLink only where the graph's
links are). All-gather and reduce-scatter take ``ranks - 1`` steps, all-reduce ``2 (ranks - 1)``; reduce
and broadcast one hop when the ring's channels are the same, else ``ranks`` steps at the tree's hop for the
Simple protocol. NCCL picks the protocol by message size, so the figure is an interval: its low end the
fastest protocol NCCL enables there, its high end the slowest (LL128 is enabled by default only over
NVLink, tuning.cc ``protoEnable``). Between nodes NCCL adds the network's hops and overheads, which a
description does not give: no figure then.

One rank crosses no link: NCCL returns before any ring (src/enqueue.cc ``taskAppend``: ``comm->nRanks == 1``
calls ``ncclLaunchOneRank``), which does nothing in place and a device memcpy, or a one-rank reduction
kernel for an average, out of place. Its figure is 0 to one such launch, the launch bounded by NCCL's base
latency of the Simple protocol (assumed: the base latency of a ring call includes its own kernel launch).
"""

from __future__ import annotations

from zerogate.config.machines import MachineDescription
from zerogate.contracts.machine import Figure
from zerogate.predict.collectives import DERIVED
from zerogate.predict.setup import Setup

SOURCE = "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/tuning.cc"
ONE_RANK_SOURCE = (
    "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/enqueue.cc"
)
# Microseconds, ring algorithm, by protocol: ncclTunerConstantsDefaults' baseLatencies (Ring) and
# hwLatencies (NVLINK and PCI rows, Ring; Tree's Simple for reduce and broadcast without the same channels).
BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
HOP_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
}
TREE_SIMPLE_HOP_US = {"nvlink": 4.0, "pci": 4.0}
# The protocols NCCL enables by default on each link (tuning.cc: LL128 only where the ring runs over NVLink).
PROTOCOLS = {"nvlink": ("LL", "LL128", "Simple"), "pci": ("LL", "Simple")}


def ring_latency_us(kind: str, ranks: int, link: str, protocol: str) -> float:
    """NCCL's modelled latency of one ``kind`` call over a ring of ``ranks`` inside one node, microseconds."""
    hop = HOP_US[link][protocol]
    if kind in ("all_gather", "reduce_scatter"):
        steps = ranks - 1
    elif kind == "all_reduce":
        steps = 2 * (ranks - 1)
    elif kind in ("reduce", "broadcast"):
        return BASE_US[protocol] + hop  # the same channels: one hop
    else:
        raise ValueError(f"no NCCL latency model for {kind!r}")
    return BASE_US[protocol] + steps * hop


def modelled_latency(kind: str, ranks: int, nvlink: bool, nodes: int = 1) -> Figure | None:
    """The per-call latency of ``kind`` between ``ranks`` GPUs as NCCL models it, seconds, as a figure whose
    ``value`` is the fastest enabled protocol's and ``high`` the slowest's; for one rank NCCL's one-rank path
    (module doc); None across nodes (the network's figures are not in a description)."""
    if nodes > 1:
        return None
    if ranks == 1:
        return Figure(
            value=0.0,
            high=BASE_US["Simple"] * 1e-6,
            basis=DERIVED,
            source=(
                f"one rank: NCCL's ncclLaunchOneRank, nothing in place or one launch out of place "
                f"({ONE_RANK_SOURCE}, taskAppend), at most the Simple protocol's base latency of "
                f"{BASE_US['Simple']:g} us ({SOURCE}; assumed to bound one launch)"
            ),
        )
    link = "nvlink" if nvlink else "pci"
    times = [ring_latency_us(kind, ranks, link, protocol) for protocol in PROTOCOLS[link]]
    if kind in ("reduce", "broadcast"):  # other channels: every step at the tree's Simple hop
        times.append(BASE_US["Simple"] + ranks * TREE_SIMPLE_HOP_US[link])
    low, high = min(times), max(times)
    return Figure(
        value=low * 1e-6,
        high=high * 1e-6,
        basis=DERIVED,
        source=(
            f"NCCL's latency model, a ring of {ranks} over {'NVLink' if nvlink else 'PCIe'} "
            f"({', '.join(PROTOCOLS[link])}): {low:.3g}-{high:.3g} us per call ({SOURCE})"
        ),
    )


def gpu_latency(kind: str, setup: Setup, machine: MachineDescription) -> Figure | None:
    """NCCL's modelled per-call latency of ``kind`` between the run's GPU ranks, over NVLink where the
    description says the GPUs have it; None off CUDA."""
    if setup.device_kind != "cuda" or not machine.gpus:
        return None
    return modelled_latency(kind, setup.ranks, machine.nvlink, setup.nodes)
