"""The short form of a box: ``2xRTX3090``, ``4xA100-SXM4-40GB``, ``8xH100``, ``1xV100-32GB``, ``RTX4090`` (one
card), as a :class:`MachineDescription` built from the card catalogue (zerogate.config.cards): each GPU's
memory, bandwidth and host link, NVLink and peer-to-peer as the card has them, the collectives' route, the
GPU-to-GPU link's bandwidth where there is one, and the collectives' per-call latency where the catalogue has
a measurement for that route among that many cards (an interval, published; else missing). What the
short form does not say is not assumed: the host RAM is the caller's (None: unknown, and the plan says the
host is not checked), the PCIe links run at the card's full width (the most a board can give: the floor
stays a lower bound), an NVLink bridge between two PCIe cards is fitted only when the caller says so."""

from __future__ import annotations

import re
from typing import Any

from zerogate.config.cards import Card, Catalogue, catalogue, close_names, find
from zerogate.config.machines import MachineDescription, check
from zerogate.errors import InputError

SHORT_FORM = re.compile(r"^\s*(?:(\d+)\s*[xX×*]\s*)?([A-Za-z][A-Za-z0-9 ._-]*?)\s*$")
# The collective kinds the floor times (zerogate.predict.comms).
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def _gpu(card: Card) -> dict[str, Any]:
    link = card.host_link
    return {
        "name": card.names[0],
        "memory_total_bytes": card.memory.bytes,
        **({"compute_capability": card.compute_capability} if card.compute_capability else {}),
        "fp16_supported": "fp16" in card.peaks,
        "bf16_supported": "bf16" in card.peaks,
        "memory_bandwidth_gbps": card.memory_bandwidth.gbps,
        "pcie": {
            "generation": link.generation,
            "width": link.width,
            "max_generation": link.generation,
            "max_width": link.width,
        },
    }


def _links(card: Card, bridge: bool, cards: Catalogue) -> tuple[bool, bool, str, str, float | None, str]:
    """(nvlink, peer_to_peer, route, the route's key in the catalogue (zerogate.config.cards.RouteLatency),
    GPU-link bandwidth per direction or None, its source)."""
    link, p2p = card.gpu_link, card.peer_to_peer
    joined = link is not None and (link.kind != "NVLink bridge" or bridge)
    peer = p2p.works and (p2p.over != "NVLink bridge" or bridge)
    if joined:
        assert link is not None
        library = "RCCL" if card.vendor == "amd" else "NCCL"
        source = (
            f"catalogue: {card.card} ({cards.source_text(link)}): {link.gbps:g} GB/s both directions per "
            "GPU, halved per direction, the most a rank's ring traffic can use"
        )
        nvlink = link.kind != "Infinity Fabric"
        return nvlink, peer, f"{link.kind} ({library})", link.kind, link.gbps / 2, source
    if peer:
        return False, peer, "peer-to-peer over PCIe", "PCIe peer-to-peer", None, ""
    return False, peer, "through host memory (no peer-to-peer, no NVLink)", "host memory", None, ""


def _kinds(
    card: Card, key: str, count: int, per_direction: float | None, source: str, cards: Catalogue
) -> dict[str, Any]:
    """Each collective kind's figures on ``count`` x ``card`` over the route ``key``: the GPU link's bandwidth
    (derived) where there is one, the catalogue's per-call latency (published, low and high) where it has one
    for that route and rank count; a figure it does not have is left out (missing, never assumed)."""
    figures: dict[str, Any] = {}
    if per_direction:
        figures["bandwidth_gbps"] = {"value": per_direction, "basis": "derived", "source": source}
    latency = card.latency(key, count)
    if latency is not None:
        figures["latency_s"] = {
            "value": latency.low_us * 1e-6,
            "high": latency.high_us * 1e-6,
            "basis": "published",
            "source": f"catalogue: {card.card} over {key} among {count} ranks ({cards.source_text(latency)})",
        }
    return {k: dict(figures) for k in KINDS} if figures else {}


def box_from_text(
    text: str,
    host_ram_bytes: int | None = None,
    *,
    nvlink_bridge: bool = False,
    shown: str = "box",
    cards: Catalogue | None = None,
) -> MachineDescription:
    """The box ``text`` names (``[N x]CARD``) as a machine description from the catalogue; ``host_ram_bytes``
    its host RAM (None: unknown, not assumed). ``nvlink_bridge``: two PCIe cards joined by an NVLink bridge.
    ``shown``: what an InputError names as the file (the setting the text came from). Unknown card: one
    InputError listing the catalogue's nearest names."""
    cards = cards or catalogue()
    parsed = SHORT_FORM.match(text)
    if parsed is None:
        raise InputError(shown, "", f"'{text}' is not a box's short form ([N x]CARD, e.g. 2xRTX3090)")
    count, wanted = int(parsed.group(1) or 1), parsed.group(2)
    if count < 1:
        raise InputError(shown, "", f"'{text}': the number of cards must be at least 1")
    card = find(wanted, cards)
    if card is None:
        near = close_names(wanted, cards)
        hint = f"; nearest: {', '.join(near)}" if near else ""
        raise InputError(shown, "", f"'{wanted}' is not in the card catalogue (config/cards.yaml){hint}")
    if host_ram_bytes is not None and host_ram_bytes < 1:
        raise InputError(shown, "host_ram_bytes", f"must be at least 1, got {host_ram_bytes}")
    if nvlink_bridge and (count != 2 or card.gpu_link is None or card.gpu_link.kind != "NVLink bridge"):
        raise InputError(
            shown, "nvlink_bridge", f"an NVLink bridge joins two {card.card} only if they take one"
        )
    nvlink, peer, route, key, per_direction, link_source = _links(card, nvlink_bridge, cards)
    described = {
        "name": re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{count}x{wanted}").strip("-"),
        "source": "described",
        "description": (
            f"{count} x {card.card} (short form '{text.strip()}'), from the card catalogue; PCIe links at "
            "the card's full width; host RAM "
            + ("given" if host_ram_bytes is not None else "not given (unknown: the host is not checked)")
        ),
        "nodes": 1,
        "gpus": [_gpu(card) for _ in range(count)],
        **({"peer_to_peer": peer, "nvlink": nvlink} if count > 1 else {}),
        **(
            {
                "collectives": {
                    "backend": "nccl",
                    "world": count,
                    "route": route,
                    "kinds": _kinds(card, key, count, per_direction, link_source, cards),
                }
            }
            if count > 1
            else {}
        ),
        "host": {"ram_total_bytes": host_ram_bytes},
    }
    return check(described, shown)
