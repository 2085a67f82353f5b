"""The network between nodes as a source words it ("8 x 200 Gb/s HDR InfiniBand", "100 Gbps Ethernet",
"InfiniBand HDR per GPU", "4x 100GbE RoCE") as a :class:`NetworkDescription`: the adapters' rate and their
count on a node where the words give it, in 10^9 bytes per second, one direction.

The rate is the number before a unit of bits (Gb/s, Gbps, Gbit/s, GbE, G) or of bytes (GB/s), or else an
InfiniBand generation's name at a 4x port's data rate (:data:`INFINIBAND`). The count is a number and ``x``
just before the rate or the generation, or "per GPU" (one adapter a GPU); "per node" makes the rate the
node's. Where the words give no count, the
node has one adapter to one a GPU: an interval, ``low`` one adapter and ``value`` one a GPU (assumed: a
training server has at most one network adapter a GPU, as NVIDIA's DGX and HGX nodes have). Words without a
rate describe no network (None): the terms across nodes then have no figure.
"""

from __future__ import annotations

import re

from zerogate.config.machines import FigureDescription, NetworkDescription

# InfiniBand data rates of a 4x port, Gb/s (InfiniBand Trade Association roadmap,
# https://www.infinibandta.org/infiniband-roadmap/).
INFINIBAND = {"SDR": 10, "DDR": 20, "QDR": 40, "FDR": 56, "EDR": 100, "HDR": 200, "NDR": 400, "XDR": 800}
INFINIBAND_SOURCE = "https://www.infinibandta.org/infiniband-roadmap/"

COUNT = r"(?:(?P<count>\d+)\s*[xX×*]\s*)?"
BYTES = re.compile(COUNT + r"(?P<rate>\d+(?:\.\d+)?)\s*(?:GB/s|GBps|GB/sec)")
BITS = re.compile(COUNT + r"(?P<rate>\d+(?:\.\d+)?)\s*(?:Gb/s|Gbps|Gbit/s|Gb/sec|GbE|Gb|G)(?![A-Za-z])")
GENERATION = re.compile(COUNT + r"(?:InfiniBand\s+|IB\s+)?(?P<generation>" + "|".join(INFINIBAND) + r")\b")
PER_GPU = re.compile(r"\b(?:per|a|each)\s+GPU\b|/\s*GPU\b", re.IGNORECASE)
PER_NODE = re.compile(r"\b(?:per|a|each)\s+(?:node|server|host)\b|/\s*node\b", re.IGNORECASE)


def _rate(text: str) -> tuple[float, int | None, str] | None:
    """(one adapter's GB/s, the count the words give or None, how the rate was read)."""
    generation = GENERATION.search(text)
    found = BYTES.search(text)
    if found:
        return float(found["rate"]), _count(found, generation), f"{found['rate']} GB/s"
    found = BITS.search(text)
    if found:
        return float(found["rate"]) / 8, _count(found, generation), f"{found['rate']} Gb/s / 8"
    found = generation
    if found:
        bits = INFINIBAND[found["generation"]]
        how = f"InfiniBand {found['generation']}, {bits} Gb/s a 4x port ({INFINIBAND_SOURCE}) / 8"
        return bits / 8, _count(found, None), how
    return None


def _count(found: re.Match[str], generation: re.Match[str] | None) -> int | None:
    """The count before the rate, else before the InfiniBand generation ("2x NDR 400G")."""
    for match in (found, generation):
        if match is not None and match["count"] is not None:
            return int(match["count"])
    return None


def network_from_text(text: str | None, gpus_per_node: int, shown: str) -> NetworkDescription | None:
    """The network ``text`` words, for nodes of ``gpus_per_node`` GPUs (module doc); ``shown`` names where the
    words come from. None where they give no rate."""
    if not text:
        return None
    read = _rate(text)
    if read is None:
        return None
    rate, count, how = read
    if count is None and PER_GPU.search(text):
        count = gpus_per_node
    if count is None and PER_NODE.search(text):
        count = 1  # the rate is the node's
    if count is not None:
        figure = FigureDescription(
            value=rate * count,
            basis="published",
            source=f"{shown}: '{text}': {count} adapter(s) a node at {how} = {rate * count:.4g} GB/s",
        )
    else:
        figure = FigureDescription(
            value=rate * gpus_per_node,
            low=rate if gpus_per_node > 1 else None,
            basis="published",
            source=(
                f"{shown}: '{text}': {how} an adapter; their count on a node not given: one to one a GPU "
                f"({gpus_per_node}; assumed: at most one adapter a GPU, as DGX and HGX nodes have), "
                f"{rate:.4g} to {rate * gpus_per_node:.4g} GB/s"
            ),
        )
    return NetworkDescription(kind=text, bandwidth_gbps=figure)
