"""The catalogue of GPU cards (config/cards.yaml): each card's names as CUDA or ROCm report them, the memory
its chips hold, its dense peaks per dtype, memory bandwidth, host link, GPU-to-GPU link and whether
peer-to-peer works, every figure with a source a reader can open. zerogate.hardware's peaks (MFU, the
planner's floor) and the short form of a box (zerogate.config.boxes) read it; a machine description may
state any figure itself, and a stated figure wins (zerogate.config.card_figures).

Lookup (:func:`find`): a card name (``NVIDIA A100-SXM4-40GB``, ``RTX3090``) is split into words, letters
and digits apart (``a 100 sxm 4 40 gb``), lower case, without the vendor's words (NVIDIA, GeForce, Tesla,
AMD, Instinct) and anything in parentheses. A catalogue name matches where its words appear in that order,
side by side, and the word after them (if any) is not a letters-only word: a letters-only word names a
variant (``RTX 3090 Ti``, ``A10G``, ``RTX 5070 Ti``, ``H100 NVL``), a number does not (``RTX 4090 24GB``),
nor a word for the kind of part (``CPU``, ``GPU``, ``Processor``).
The longest matching name wins, so ``A100-SXM4-40GB`` is not ``A100 80GB PCIe`` and ``RTX 3090 Ti`` is not
``RTX 3090``; a variant not listed matches nothing (its figures are missing, never another card's).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import ConfigDict, Field, ValidationError, model_validator

from zerogate.config.tables import read_yaml
from zerogate.config.validation import dotted
from zerogate.contracts.base import Record
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[3]
CARDS_FILE = "config/cards.yaml"
DTYPES = ("fp16", "bf16", "fp32")
RecordT = TypeVar("RecordT", bound=Record)


class Named(Protocol):
    @property
    def names(self) -> list[str]: ...


NamedT = TypeVar("NamedT", bound=Named)
# Words of a reported name that name the vendor or the product line, not the card.
VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})
# Words after a name that say what kind of part it is, not which variant (lscpu's "Intel(R) Xeon(R) Gold 6248
# CPU @ 2.50GHz", "NVIDIA A100 GPU").
KIND_WORDS = frozenset({"cpu", "gpu", "processor"})


class CardRecord(Record):
    """A closed, strictly typed part of the catalogue."""

    model_config = ConfigDict(strict=True)


class Cited(CardRecord):
    source: str = Field(description="a key of the catalogue's sources")
    how: str | None = Field(None, description="how the figure is derived from the source, where it is")


class CardPeak(Cited):
    tflops: float = Field(gt=0, description="dense (no 2:4 sparsity) 10^12 FLOP/s")
    accumulate: Literal["fp16", "fp32"] = Field(description="the accumulate precision of the figure")


class CardMemory(Cited):
    bytes: int = Field(ge=1, description="what the chips hold (CUDA gives a process a little less)")


class CardBandwidth(Cited):
    gbps: float = Field(gt=0, description="10^9 bytes per second")


class HostLink(Cited):
    bus: Literal["PCIe"] = "PCIe"
    generation: int = Field(ge=1)
    width: int = Field(ge=1)


class GpuLink(Cited):
    kind: Literal["NVLink", "NVLink bridge", "Infinity Fabric"]
    gbps: float = Field(gt=0, description="10^9 bytes per second, both directions together, per GPU")


class PeerToPeer(Cited):
    works: bool = Field(description="the driver gives one card direct access to another's memory")
    over: Literal["PCIe", "NVLink", "NVLink bridge", "Infinity Fabric", "none"]


class RouteLatency(Cited):
    """The per-call latency of NCCL's (RCCL's) collectives among ``ranks`` of these cards over ``route`` (the
    box's route, zerogate.config.boxes: the card's GPU link, peer-to-peer over PCIe, or host memory): the
    time of a call too small for the bandwidth to count (nccl-tests at a few bytes), as an interval over
    what its sources spread over (the kinds and algorithms they timed)."""

    route: Literal["NVLink", "NVLink bridge", "Infinity Fabric", "PCIe peer-to-peer", "host memory"]
    ranks: int = Field(ge=2, description="the ranks the calls were timed among")
    low_us: float = Field(gt=0, description="microseconds per call, the interval's low end")
    high_us: float = Field(gt=0, description="microseconds per call, the interval's high end")

    @model_validator(mode="after")
    def _ordered(self) -> RouteLatency:
        if self.high_us < self.low_us:
            raise ValueError(f"high_us {self.high_us} is below low_us {self.low_us}")
        return self


class Card(CardRecord):
    card: str = Field(description="the card's name as the plan prints it")
    vendor: Literal["nvidia", "amd"]
    names: list[str] = Field(min_length=1, description="names as CUDA/ROCm report them, and short forms")
    compute_capability: str | None = None
    memory: CardMemory
    peaks: dict[Literal["fp16", "bf16", "fp32"], CardPeak] = Field(
        description="dense peaks; a dtype the card does not compute in is absent"
    )
    memory_bandwidth: CardBandwidth
    host_link: HostLink
    gpu_link: GpuLink | None = Field(None, description="NVLink / Infinity Fabric; absent where there is none")
    peer_to_peer: PeerToPeer
    collective_latency: list[RouteLatency] = Field(
        [], description="per-call latency by route and ranks; a route and rank count not listed is missing"
    )
    note: str | None = None

    def latency(self, route: str, ranks: int) -> RouteLatency | None:
        """The catalogue's per-call latency over ``route`` among ``ranks`` of this card, None where nobody
        measured it (a latency grows with the ranks a ring passes: one timed at another count is not it)."""
        return next((f for f in self.collective_latency if f.route == route and f.ranks == ranks), None)

    def short_form(self) -> str:
        """The name to type in a box's short form: the first without spaces after the reported one."""
        return next((n for n in self.names[1:] if " " not in n), self.names[-1])

    def cited(self) -> list[tuple[str, Cited]]:
        """(what, figure) of every figure the card states."""
        parts: list[tuple[str, Cited | None]] = [
            ("memory", self.memory),
            ("memory_bandwidth", self.memory_bandwidth),
            ("host_link", self.host_link),
            ("gpu_link", self.gpu_link),
            ("peer_to_peer", self.peer_to_peer),
            *((f"peaks.{dtype}", peak) for dtype, peak in self.peaks.items()),
            *((f"collective_latency.{i}", figure) for i, figure in enumerate(self.collective_latency)),
        ]
        return [(what, figure) for what, figure in parts if figure is not None]


class Catalogue(CardRecord):
    """config/cards.yaml: the sources (key -> title and URL) and the cards."""

    sources: dict[str, str]
    cards: list[Card]

    @model_validator(mode="after")
    def _consistent(self) -> Catalogue:
        check_catalogue(self.sources, [(card.card, card.names, card.cited()) for card in self.cards])
        return self

    def source_text(self, figure: Cited) -> str:
        """The figure's source as a reader opens it, with how the figure is derived."""
        text = self.sources[figure.source]
        return text if figure.how is None else f"{text}; {figure.how}"


def check_catalogue(
    sources: dict[str, str], entries: list[tuple[str, list[str], list[tuple[str, Any]]]]
) -> None:
    """A catalogue's entries, (entry, its names, (what, figure with a ``source``) of each figure), against its
    sources: every figure's source is one of them, each source has a URL to open, a name belongs to one
    entry. ValueError naming the first that does not."""
    seen: dict[tuple[str, ...], str] = {}
    for entry, names, figures in entries:
        for what, figure in figures:
            if figure.source not in sources:
                raise ValueError(f"{entry}: {what}: source '{figure.source}' is not in sources")
        for name in names:
            words = name_words(name)
            if words in seen and seen[words] != entry:
                raise ValueError(f"name '{name}' of {entry} is also {seen[words]}'s")
            seen[words] = entry
    for key, text in sources.items():
        if "https://" not in text:
            raise ValueError(f"sources.{key}: no URL to open")


@functools.cache
def name_words(name: str) -> tuple[str, ...]:
    """A card name's words for matching (the module's docstring)."""
    plain = re.sub(r"\([^)]*\)", " ", name.lower())
    return tuple(w for w in re.findall(r"[a-z]+|[0-9]+", plain) if w not in VENDOR_WORDS)


def words_match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """``pattern`` side by side in ``words``, not followed by a letters-only word (a variant) other than a
    kind of part (:data:`KIND_WORDS`)."""
    n = len(pattern)
    for start in range(len(words) - n + 1):
        if words[start : start + n] == pattern:
            after = words[start + n] if start + n < len(words) else None
            if after is None or after.isdigit() or after in KIND_WORDS:
                return True
    return False


def read_checked(model: type[RecordT], path: str | None, default: str) -> RecordT:
    """A catalogue file (``default`` under the repository, or ``path``) read and checked whole as ``model``;
    one line naming the file and the first wrong key otherwise."""
    file = Path(path) if path is not None else REPO / default
    shown = str(path) if path is not None else default
    raw = read_yaml(file, shown)
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise InputError(shown, dotted(list(first["loc"])), first["msg"]) from None


def longest_named(text: str | None, entries: Iterable[NamedT]) -> NamedT | None:
    """The entry whose longest name matches ``text`` (the module doc's lookup); None when none does."""
    if not text:
        return None
    words = name_words(text)
    best: tuple[int, NamedT] | None = None
    for entry in entries:
        for name in entry.names:
            pattern = name_words(name)
            if pattern and words_match(pattern, words) and (best is None or len(pattern) > best[0]):
                best = (len(pattern), entry)
    return None if best is None else best[1]


@functools.cache
def catalogue(path: str | None = None) -> Catalogue:
    """The catalogue (config/cards.yaml, or ``path``), read and checked once."""
    return read_checked(Catalogue, path, CARDS_FILE)


def find(device_name: str | None, cards: Catalogue | None = None) -> Card | None:
    """The catalogue's card whose longest name matches ``device_name``; None when none does."""
    return longest_named(device_name, (cards or catalogue()).cards)


def nearest_named(wanted: str, named: Iterable[tuple[str, str, str]], count: int = 6) -> list[str]:
    """The names shown for the entries nearest ``wanted`` (for an error that lists them), one per entry:
    first the entries with a name that holds it, then the closest spellings. ``named``: (a name, its entry,
    the name shown for the entry) for every name of every entry."""
    key = "".join(name_words(wanted))
    by_key: dict[str, tuple[str, str]] = {}  # joined words -> (the name shown, entry)
    for name, entry, shown in named:
        by_key.setdefault("".join(name_words(name)), (shown, entry))
    holding = sorted((k for k in by_key if key and key in k), key=len)
    spelled = difflib.get_close_matches(key, list(by_key), n=len(by_key), cutoff=0.5)
    chosen: dict[str, str] = {}  # entry -> its name shown
    for found in holding + spelled:
        shown, entry = by_key[found]
        chosen.setdefault(entry, shown)
    return list(chosen.values())[:count]


def close_names(device_name: str, cards: Catalogue | None = None, count: int = 6) -> list[str]:
    """The catalogue's names nearest ``device_name``, one per card, as :func:`nearest_named` finds them
    (``A100`` -> the four A100s), each shown in its short form."""
    cards = cards or catalogue()
    return nearest_named(
        device_name, ((n, c.card, c.short_form()) for c in cards.cards for n in c.names), count
    )
