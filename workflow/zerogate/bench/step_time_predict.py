"""One published step-time row (config/published_setups/step_times.yaml) predicted by the step-time ledger
(zerogate.predict.step_time): the row's run planned for its hardware as the memory rows are
(zerogate.bench.measured_rows.plan_measured), its ledger read for the part of the step the published time
covers, over every value the source leaves open.

The row's box is described as ``make plan BOX=<N>x<card>`` describes one
(zerogate.config.boxes.box_from_text): each GPU's memory bandwidth and PCIe link, NVLink and peer-to-peer,
and the collectives' route and GPU-link bandwidth as the card catalogue (config/cards.yaml) has them for the
card, each with its source; over several nodes, the network between them as ``hardware.inter_node_link``
words it (zerogate.config.networks); the host's memory from the CPU catalogue (config/host_cpus.yaml,
zerogate.config.host_cpus) where the row names a CPU it has: every socket's bandwidth, one NUMA node a socket
(the ledger's slow end takes one node's share: zerogate.predict.step_time_memory.host_bandwidths); else none
(CPU Adam on that host has no figure).
A card the catalogue does not know is described by its name alone: the ledger names what it lacks, first
the card itself with the catalogue's nearest names (:func:`unknown_card`).

What the source leaves out is bracketed where it takes a few values that change the prediction: the card's
variant where the row names it without one ("NVIDIA A100": every catalogue card whose name holds it, narrowed
to the stated memory), the dtype (fp16 and bf16, each at its own peak), the GPUs per node (1, 2, 4 or 8 that
divide the total: a server holds at most 8, assumed), the offloads' pinned memory (pinned and pageable),
activation checkpointing (off, and on as the ledger models it: the whole forward again); the interval is the
lowest low and the highest high over them. A term without a figure
on some of the bracketed cards only (the collectives' latency over a route the catalogue has no measurement
for) is named with those cards. What cannot be bracketed (a model without a shipped config, the micro-batch,
the sequence length, the accumulation, the steps of an epoch) makes the row "cannot be judged", naming it.
A run not made with DeepSpeed (FSDP, FSDP2, HSDP) is shown with ZeRO-3's ledger and not judged: the ledger
models DeepSpeed's streams and buckets.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, NamedTuple

from zerogate.bench.measured_rows import plan_measured
from zerogate.config.boxes import box_from_text
from zerogate.config.cards import Card, catalogue, close_names, find, name_words
from zerogate.config.host_cpus import host_memory, with_host_memory
from zerogate.config.machines import MachineDescription
from zerogate.config.networks import network_from_text
from zerogate.config.published_setups import (
    OUTCOME_ONLY,
    Hardware,
    MeasuredModel,
    MeasuredRow,
    MeasuredSetup,
    Outcome,
)
from zerogate.config.step_times import STEP_TIMES_FILE, StepTimeRow
from zerogate.contracts.plan import StepTime
from zerogate.hardware import peak
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.step_time import planned_step_time

# A GPU server holds at most 8 GPUs (assumed: the usual HGX/DGX and PCIe servers), so an unstated number of
# GPUs per node is one of these that divides the total.
NODE_SIZES = (1, 2, 4, 8)


# The ledger does not read the GPU's memory size (zerogate.predict.step_time_terms); where a source does
# not state it, this stands in so that the run renders (the memory rows' fit is not judged here).
UNSTATED_GPU_MEMORY = 80 * 2**30


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The ledger's interval for the covered part, in the published unit, over the bracketed options."""

    interval: tuple[float, float] | None
    deciding: tuple[str, ...]
    missing: tuple[str, ...]
    options: int


def needs(row: StepTimeRow) -> list[str]:
    """What the prediction cannot do without and the source does not state."""
    found = []
    if row.model.config is None:
        found.append(f"model.config (no shipped config; the source says {row.model.shape_as_stated})")
    if row.published.per == "epoch":
        found.append("the steps of an epoch (the dataset's size in tokens)")
    for key in ("micro_batch_per_gpu", "seq_len", "gradient_accumulation_steps"):
        if getattr(row.setup, key) is None:
            found.append(f"setup.{key}")
    return found


class Option(NamedTuple):
    """One value of everything the row leaves open: the catalogue's card (None: the catalogue has none of that
    name), the dtype, the GPUs per node, the offloads' pinned memory, activation checkpointing."""

    card: Card | None
    dtype: str
    per_node: int
    pinned: bool
    checkpointing: bool


def cards_named(row: StepTimeRow) -> list[Card]:
    """The catalogue's cards the row's GPU can be: the one its name names (zerogate.config.cards.find), else
    every card with a name holding the row's name (a card named without its variant, "NVIDIA A100": the four
    A100s), narrowed to the stated memory; empty where the catalogue has none."""
    named = find(row.hardware.gpu)
    if named is not None:
        return [named]
    wanted = "".join(name_words(row.hardware.gpu))
    memory = row.hardware.gpu_memory_bytes
    return [
        card
        for card in catalogue().cards
        if wanted
        and any(wanted in "".join(name_words(name)) for name in card.names)
        and (memory is None or card.memory.bytes == memory)
    ]


def options(row: StepTimeRow) -> list[Option]:
    """Every value the source leaves open, combined (module doc)."""
    cards: list[Card | None] = list(cards_named(row)) or [None]
    peaks = {d for card in cards if card is not None for d in card.peaks} or {
        d for d in ("fp16", "bf16") if peak(row.hardware.gpu, d)
    }
    dtypes = [row.setup.dtype] if row.setup.dtype else [d for d in ("fp16", "bf16") if d in peaks]
    total = row.hardware.total_gpus
    per_node = (
        [row.setup.gpus_per_node]
        if row.setup.gpus_per_node
        else [
            n for n in NODE_SIZES if total % n == 0 and (row.setup.nodes == 1 or n * row.setup.nodes == total)
        ]
    )
    offloaded = row.setup.offload_optimizer != "none" or row.setup.offload_param != "none"
    pinned = [row.setup.pin_memory] if row.setup.pin_memory is not None or not offloaded else [True, False]
    stated = row.setup.activation_checkpointing
    checkpointing = [False, True] if stated is None else [stated]
    combined = itertools.product(
        cards, dtypes or ["fp16"], per_node, [bool(p) for p in pinned], checkpointing
    )
    return [Option(*values) for values in combined]


def catalogue_box(row: StepTimeRow, card: Card, per_node: int) -> MachineDescription:
    """The row's box as the card catalogue describes ``per_node`` x ``card`` (module doc), over its nodes,
    with the network between them as the row words it (zerogate.config.networks; none where it gives no
    rate)."""
    shown = f"{STEP_TIMES_FILE} ({row.id})"
    box = box_from_text(f"{per_node}x{card.names[0]}", shown=shown)
    nodes = row.hardware.total_gpus // per_node
    if nodes == 1:
        return box
    network = network_from_text(row.hardware.inter_node_link, per_node, f"{shown} hardware.inter_node_link")
    return box.model_copy(update={"nodes": nodes, "network": network})


def measured_row(row: StepTimeRow, option: Option) -> MeasuredRow:
    """The row as a memory row of zerogate.config.published_setups, at one bracketed option."""
    stated = row.setup.model_dump(
        exclude={
            "framework",
            "pin_memory",
            "bind_cores_to_rank",
            "activation_checkpointing_detail",
            "packed_samples",
        }
    )
    stated.update(
        dtype=option.dtype,
        gpus_per_node=option.per_node,
        nodes=row.hardware.total_gpus // option.per_node,
        activation_checkpointing=option.checkpointing,
    )
    return MeasuredRow(
        kind="measured",
        id=row.id,
        source=row.source,
        model=MeasuredModel(name=row.model.name, config=row.model.config, parameters=row.model.parameters),
        setup=MeasuredSetup.model_validate(stated),
        hardware=Hardware(
            gpu=row.hardware.gpu, gpu_memory_bytes=row.hardware.gpu_memory_bytes or UNSTATED_GPU_MEMORY
        ),
        published=Outcome(outcome="fits", level=OUTCOME_ONLY),
    )


def part_seconds(step: StepTime, covers: str) -> tuple[tuple[float, float] | None, str | None, list[str]]:
    """(low, high) seconds of the covered part, its deciding term, and its terms without a figure."""
    per = {"optimizer_step": None, "forward_backward": MICRO_STEP, "optimizer_update": BOUNDARY}[covers]
    terms = [t for t in step.terms if per is None or t.per == per]
    names = {t.name for t in terms}
    # step.missing says "<term>: <why>"; the term's name is enough here (plan.json keeps the why).
    missing = [
        m.split(":")[0] + (" latency" if m.endswith("latency (no figure)") else "") for m in step.missing
    ]
    missing = list(dict.fromkeys(m for m in missing if m.removesuffix(" latency") in names))
    if covers == "optimizer_step":
        bounds = None if step.low_s is None else (step.low_s, step.high_s)
        return bounds, step.deciding_term, missing
    if covers == "forward_backward":
        bounds = None if step.micro_step_low_s is None else (step.micro_step_low_s, step.micro_step_high_s)
        return bounds, step.deciding_term, missing
    known = [t for t in terms if t.low_s is not None]
    if not known:
        return None, None, missing
    deciding = max(known, key=lambda t: t.contribution_s or 0.0).name
    return (sum(t.low_s for t in known), sum(t.high_s for t in known)), deciding, missing


def predict(row: StepTimeRow, config: Any, repo: Path) -> Prediction:
    """The ledger over every bracketed option (module doc), in the published unit."""
    lows, highs, deciding = [], [], []
    missing: dict[str, list[str]] = {}  # a term without a figure -> the catalogue cards it lacks one on
    chosen = options(row)
    host = host_memory(row.hardware.host_cpu)
    runs: dict[tuple[str, int, bool], Any] = {}  # the plan depends on neither the card's variant nor pinning
    for option in chosen:
        key = (option.dtype, option.per_node, option.checkpointing)
        if key not in runs:
            runs[key] = plan_measured(measured_row(row, option), config, repo)
        run = runs[key]
        setup = dataclasses.replace(
            run.planned.setup,
            pin_memory=option.pinned,
            bind_cores=row.setup.bind_cores_to_rank,
            packed_samples=row.setup.packed_samples,
            attention_kernel=row.setup.attention or "unknown",
        )
        machine = run.machine if option.card is None else catalogue_box(row, option.card, option.per_node)
        machine = with_host_memory(machine, host)
        step = planned_step_time(run.planned.counts, setup, machine, run.planned.activations)
        bounds, decides, lacking = part_seconds(step, row.published.covers)
        for term in lacking:
            cards = missing.setdefault(term, [])
            if option.card is not None and option.card.card not in cards:
                cards.append(option.card.card)
        if decides and decides not in deciding:
            deciding.append(decides)
        if bounds is not None:
            lows.append(bounds[0])
            highs.append(bounds[1])
    interval = (min(lows), max(highs)) if lows else None
    if interval is not None and row.published.seconds is None:
        setup = row.setup
        tokens = setup.micro_batch_per_gpu * setup.seq_len * setup.gradient_accumulation_steps
        interval = (tokens / interval[1], tokens / interval[0])
    named = [lacking_on(term, cards, chosen) for term, cards in missing.items()]
    if chosen and chosen[0].card is None:
        named.insert(0, unknown_card(row.hardware.gpu))
    return Prediction(interval, tuple(deciding), tuple(named), len(chosen))


def unknown_card(gpu: str) -> str:
    """Why a row's device terms have no figure: its GPU is not in the card catalogue (the nearest names)."""
    near = close_names(gpu)
    hint = f"; nearest: {', '.join(near)}" if near else ""
    return f"hardware.gpu ('{gpu}' is not in the card catalogue, config/cards.yaml{hint})"


def lacking_on(term: str, cards: list[str], chosen: list[Option]) -> str:
    """A term without a figure, and the bracketed cards it lacks one on where it has one on the others."""
    every = {option.card.card for option in chosen if option.card is not None}
    return term if not cards or set(cards) == every else f"{term} (on {', '.join(cards)})"
