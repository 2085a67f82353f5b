"""A described GPU's figures, each with where it comes from: stated in the machine description (which wins)
or the card catalogue's (config/cards.yaml, zerogate.config.cards). The planner's floor and the step-time
ledger take a card's peak from :func:`gpu_peak`, and nothing else, so a plan names which figure it used."""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.cards import CARDS_FILE, catalogue, find
from zerogate.config.machines import GpuDescription, MachineDescription


@dataclass(frozen=True)
class UsedPeak:
    """A card's dense peak for one dtype (10^12 FLOP/s; None: missing) and where it comes from, or why it is
    missing (naming the card)."""

    tflops: float | None
    source: str


def gpu_peak(machine: MachineDescription, gpu: GpuDescription, dtype: str) -> UsedPeak:
    """``gpu``'s peak for ``dtype``: the description's stated figure ("stated in <file>"), else the
    catalogue's ("catalogue: <card> (<source>)"), else None with why (the card named, never assumed)."""
    described = machine.file or f"the description '{machine.name}'"
    stated = None if gpu.peaks is None else gpu.peaks.get(dtype)  # type: ignore[call-overload]
    if stated is not None:
        return UsedPeak(stated.tflops, f"stated in {described} ({stated.source})")
    card = find(gpu.name)
    if card is None:
        return UsedPeak(
            None,
            f"peak missing: {gpu.name} is not in the card catalogue ({CARDS_FILE}) and "
            f"{described} states no {dtype} peak for it (gpus[].peaks.{dtype})",
        )
    found = card.peaks.get(dtype)  # type: ignore[call-overload]
    if found is None:
        return UsedPeak(None, f"peak missing: the catalogue's {card.card} has no {dtype} rate")
    return UsedPeak(found.tflops, f"catalogue: {card.card} ({catalogue().source_text(found)})")
