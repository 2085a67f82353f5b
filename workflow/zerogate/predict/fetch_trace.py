"""ZeRO-3's fetch trace: which parameters it gathers in a micro-step's forward and backward, and the most it
holds gathered at once (DeepSpeed 0.19.8, zero/partitioned_param_coordinator.py). The communication theory
counts its gathers, the memory ledger its most gathered."""

from __future__ import annotations

import itertools
import math

from zerogate.contracts.model import ModelCounts, is_persistent


def padded(numel: int, world: int) -> int:
    return math.ceil(numel / world) * world


def fetch_units(counts: ModelCounts, leaf_blocks: bool) -> list[tuple[int, ...]]:
    """ZeRO-3's fetch units in forward order, as indices into ``counts.numels`` (the model's parameter order:
    embedding, the decoder layers' parameters, final norm, LM head).

    Each parameter is a unit of its own (a module's weight and bias are two units here: the volume is the
    same, the calls are counted by the prefetch bucket anyway); with the decoder layer a ZeRO-3 leaf module
    (zerogate.render.cpu_tuning) a layer's parameters are one unit. A tied LM head uses the embedding's weight
    again at the end of the forward (the last unit is the embedding's index).
    """
    count = len(counts.numels)
    head, tail = 1, 1 if counts.tied_embeddings else 2
    per_layer, rest = divmod(count - head - tail, counts.layers) if counts.layers else (0, 1)
    if leaf_blocks and per_layer and not rest:
        layers = [
            tuple(range(head + i * per_layer, head + (i + 1) * per_layer)) for i in range(counts.layers)
        ]
        units = [(0,), *layers, *[(i,) for i in range(head + counts.layers * per_layer, count)]]
    else:
        units = [(i,) for i in range(count)]
    return [*units, (0,)] if counts.tied_embeddings else units


def zero3_trace(
    counts: ModelCounts, world: int, persistence_threshold: int, max_reuse_distance: int, leaf_blocks: bool
) -> tuple[dict[str, int], int]:
    """ZeRO-3's fetch trace of one micro-step, once it is complete: the elements it all-gathers in the
    forward and the backward, and the most non-persistent elements it holds gathered at once.

    DeepSpeed 0.19.8 (zero/partitioned_param_coordinator.py, ``__params_to_release``): after a module runs,
    its non-persistent parameters are released unless one of the next modules in the trace, within
    ``stage3_max_reuse_distance`` parameters traversed, uses them again. The trace is the forward's units
    then the backward's (the reverse). A parameter used again soon (the whole model, when it is below the
    distance) is gathered once per micro-step, not twice, and stays gathered from its forward to its
    backward. Each gather moves, and each gathered parameter holds, the N-padded parameter. (The first
    micro-step records the trace and releases every module after it runs; this is every later one.)
    """
    numels = counts.numels
    units = fetch_units(counts, leaf_blocks)
    trace = units + units[::-1]
    forward_len = len(units)
    # before[k]: the elements of the trace's units before position k (what traversing them counts); ahead[k]:
    # each parameter's next position in the trace after k.
    before = [0, *itertools.accumulate(sum(numels[i] for i in unit) for unit in trace)]
    ahead = _next_positions(trace)
    resident: set[int] = set()
    held = 0  # the padded elements of the resident parameters
    gathered = {"forward": 0, "backward": 0, "tied": 0}
    most_resident = 0
    for position, unit in enumerate(trace):
        phase = "forward" if position < forward_len else "backward"
        for index in unit:
            if is_persistent(numels[index], persistence_threshold) or index in resident:
                continue
            resident.add(index)
            held += padded(numels[index], world)
            tied_again = phase == "forward" and position == forward_len - 1 and counts.tied_embeddings
            gathered["tied" if tied_again else phase] += padded(numels[index], world)
        most_resident = max(most_resident, held)
        # A parameter stays when the trace uses it again at a later unit reached before the units between
        # have traversed max_reuse_distance elements.
        for index in unit:
            if is_persistent(numels[index], persistence_threshold) or index not in resident:
                continue
            later = ahead[position].get(index)
            if later is None or before[later] - before[position + 1] >= max_reuse_distance:
                resident.discard(index)
                held -= padded(numels[index], world)
    return gathered, most_resident


def zero3_gathers(
    counts: ModelCounts, world: int, persistence_threshold: int, max_reuse_distance: int, leaf_blocks: bool
) -> dict[str, int]:
    """Elements ZeRO-3 all-gathers in one micro-step's forward and backward (zero3_trace)."""
    return zero3_trace(counts, world, persistence_threshold, max_reuse_distance, leaf_blocks)[0]


def zero3_most_gathered(
    counts: ModelCounts, world: int, persistence_threshold: int, max_reuse_distance: int, leaf_blocks: bool
) -> int:
    """The most non-persistent elements ZeRO-3 holds gathered at once in a micro-step (zero3_trace), before
    the prefetcher's bucket: what the peak prediction's gathered-parameter term counts."""
    return zero3_trace(counts, world, persistence_threshold, max_reuse_distance, leaf_blocks)[1]


def _next_positions(trace: list[tuple[int, ...]]) -> list[dict[int, int]]:
    """For each position of ``trace``, the next later position that uses each of its unit's parameters."""
    seen: dict[int, int] = {}
    ahead: list[dict[int, int]] = [{} for _ in trace]
    for position in range(len(trace) - 1, -1, -1):
        ahead[position] = {index: seen[index] for index in trace[position] if index in seen}
        for index in trace[position]:
            seen[index] = position
    return ahead
