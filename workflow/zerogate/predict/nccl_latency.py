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
NVLink, tuning.cc ``protoEnable``).

Across nodes the same ring crosses the network: of its steps, ``nodes - 1`` (all-reduce ``2 (nodes - 1)``)
are network hops at the NET row's latency (the Tree's where a node has one rank), and every other step costs
at least NCCL's network post overhead (``getNetOverhead``: 1 us on Intel hosts, 2 us on AMD ones, three times
that for Simple; the host's vendor is not in a description, so the low end takes Intel's, the high end AMD's).
The network's own latency (``graph->latencyInter``) is 0 for InfiniBand (src/transport/net_ib/init.cc
``props->latency = 0``). Reduce and broadcast take one network hop on the same channels, else every step at
the Tree's Simple network hop.

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
# hwLatencies' NET row (Ring; Tree where a node has one rank), and getNetOverhead's per-step floor on a
# node-crossing ring (Intel, AMD), microseconds.
NET_HOP_US = {
    "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
    "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
}
NET_OVERHEAD_US = (1.0, 2.0)
NET_LATENCY_SOURCE = "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/transport/net_ib/init.cc"
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


def across_nodes_latency_us(
    kind: str, ranks: int, nodes: int, link: str, protocol: str, overhead: float
) -> float:
    """NCCL's modelled latency of one ``kind`` call over a ring of ``ranks`` spread over ``nodes``,
    microseconds, with ``overhead`` the host's network post overhead per step (module doc)."""
    network = NET_HOP_US["tree" if ranks // nodes == 1 else "ring"][protocol]
    if kind in ("reduce", "broadcast"):
        return BASE_US[protocol] + NET_HOP_US["ring"][protocol]  # the same channels: one network hop
    if kind in ("all_gather", "reduce_scatter"):
        steps, crossing = ranks - 1, nodes - 1
    elif kind == "all_reduce":
        steps, crossing = 2 * (ranks - 1), 2 * (nodes - 1)
    else:
        raise ValueError(f"no NCCL latency model for {kind!r}")
    inside = max(HOP_US[link][protocol], overhead * (3 if protocol == "Simple" else 1))
    return BASE_US[protocol] + (steps - crossing) * inside + crossing * network


def modelled_latency(kind: str, ranks: int, nvlink: bool, nodes: int = 1) -> Figure | None:
    """The per-call latency of ``kind`` between ``ranks`` GPUs as NCCL models it, seconds, as a figure whose
    ``value`` is the fastest enabled protocol's and ``high`` the slowest's; for one rank NCCL's one-rank path,
    across nodes its ring with the network's hops (module doc)."""
    if ranks == 1 and nodes == 1:
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
    route, cited = ("NVLink" if nvlink else "PCIe"), SOURCE
    if nodes > 1:
        times = [
            across_nodes_latency_us(kind, ranks, nodes, link, protocol, overhead)
            for protocol in PROTOCOLS[link]
            for overhead in NET_OVERHEAD_US
        ]
        slow_hop = NET_HOP_US["tree"]["Simple"]
        route = (
            f"{nodes} nodes ({route} inside, the network between; the host's network overhead "
            f"{NET_OVERHEAD_US[0]:g}-{NET_OVERHEAD_US[1]:g} us a step)"
        )
        cited += f"; the network's own latency 0 as NCCL's InfiniBand transport has it, {NET_LATENCY_SOURCE}"
    else:
        times = [ring_latency_us(kind, ranks, link, protocol) for protocol in PROTOCOLS[link]]
        slow_hop = TREE_SIMPLE_HOP_US[link]
    if kind in ("reduce", "broadcast"):  # other channels: every step at the tree's Simple hop
        times.append(BASE_US["Simple"] + ranks * slow_hop)
    low, high = min(times), max(times)
    return Figure(
        value=low * 1e-6,
        high=high * 1e-6,
        basis=DERIVED,
        source=(
            f"NCCL's latency model, a ring of {ranks} over {route} ({', '.join(PROTOCOLS[link])}): "
            f"{low:.3g}-{high:.3g} us per call ({cited})"
        ),
    )


def gpu_latency(kind: str, setup: Setup, machine: MachineDescription) -> Figure | None:
    """NCCL's modelled per-call latency of ``kind`` between the run's GPU ranks, over NVLink where the
    description says the GPUs have it; None off CUDA."""
    if setup.device_kind != "cuda" or not machine.gpus:
        return None
    return modelled_latency(kind, setup.ranks, machine.nvlink, setup.nodes)
