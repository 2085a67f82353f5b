"""One traced micro-step as the events its trace saw, the figures read from them, and the same events at
another micro-batch.

zerogate.predict.trace runs a fake forward and backward and writes down, in order, what its counting modes
see: each storage that appears (its bytes) and each that is freed, each tensor saved for backward (its
bytes), each ATen op beyond the products (its bytes moved and its largest tensor's elements), and the two
moments the figures split at (the forward's end, the first accumulated weight gradient). :meth:`TraceLog.
figures` reads every figure of the trace from those events alone: the live bytes and their peak in each
window, each storage in its C allocator size class, counted by zerogate.runtime.live_tensors.LiveCount (what
the trace's counting mode counts them with as they happen), and the operators as
zerogate.predict.operator_tally counts them.

A micro-batch's events at another micro-batch (:func:`at_micro_batch`): the micro-batch is the leading
dimension of every activation, so two traces that differ only in it are expected to see the same ops in the
same order, each byte count either the same in both (weights' gradients, rotary tables) or growing by the same
amount per sample (expected, not proven: the benchmark below checks it). Where the traces at two micro-batches
saw the same events in the same order (same kinds, the same storage freed at the same moment, the same ops),
each count at a third micro-batch is taken on the line through the two; where they did not (a kernel chosen by
size, a copy one shape needs and another does not), there is no line and the micro-step is traced at that
micro-batch. ``python -m zerogate.predict.trace_check`` compares the two ways on every shipped model config
(docs/measurements.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.predict.operator_tally import OperatorTally
from zerogate.runtime.live_tensors import LiveCount

# The events, as tuples (their first item the kind):
ALLOC = "alloc"  # (ALLOC, storage number, bytes): a storage appeared
FREE = "free"  # (FREE, storage number): it was freed
SAVED = "saved"  # (SAVED, bytes): a storage saved for backward, counted once, model state excluded
OP = "op"  # (OP, namespace, name, is_view, bytes moved, elements of its largest tensor)
FORWARD_END = "forward_end"  # (FORWARD_END,): the forward with loss has returned
FIRST_GRADIENT = "first_gradient"  # (FIRST_GRADIENT,): the first weight gradient was accumulated
END = "end"  # (END,): the backward has returned; what follows is not counted

# Per kind, the positions of the counts that scale with the micro-batch; the rest must be equal.
_COUNTS = {ALLOC: (2,), SAVED: (1,), OP: (4, 5)}


@dataclass(frozen=True)
class StepFigures:
    """What one traced micro-step gives, in bytes (zerogate.predict.trace reads ActivationTrace from them)."""

    saved_bytes: int
    # Every storage created in the forward and still alive, model state excluded.
    live_bytes_at_forward_end: int
    transient_bytes: int  # the backward's peak above the forward's end, to the first accumulated gradient
    # Live bytes at the first accumulated gradient less those at the forward's end.
    at_first_gradient_change: int
    # The backward's peak after the first accumulated gradient, above its bytes.
    after_first_gradient_bytes: int
    math_attention: bool  # torch's SDPA math kernel ran (it saves the s x s attention probabilities)
    size_classes: dict[str, dict[str, int]]  # per window, each size class's peak of live bytes
    operators: OperatorTally  # every op of the forward with loss and the backward, beyond the products


@dataclass(frozen=True)
class TraceLog:
    """A traced micro-step's events (the module docstring) at ``micro_batch``, and whether SDPA's math kernel
    ran in it."""

    micro_batch: int
    events: tuple[tuple, ...]
    math_attention: bool

    def figures(self) -> StepFigures:
        """The trace's figures, read from its events."""
        live = LiveCount()
        saved = 0
        operators = OperatorTally()
        size_classes: dict[str, dict[str, int]] = {}
        forward_end = 0
        first: tuple[int, int] | None = None  # live bytes and their peak at the first gradient
        for event in self.events:
            kind = event[0]
            if kind == ALLOC:
                live.count(event[1], event[2])
            elif kind == FREE:
                live.uncount(event[1])
            elif kind == OP:
                operators = operators.added(*event[1:])
            elif kind == SAVED:
                saved += event[1]
            elif kind == FORWARD_END:
                size_classes["forward"] = dict(live.class_peak)
                forward_end = live.restart_peak()
            elif kind == FIRST_GRADIENT and first is None:
                first = (live.now, live.peak)
                size_classes["backward"] = dict(live.class_peak)
                live.restart_peak()
            elif kind == END:
                break
        if first is None:  # no parameter takes a gradient: the whole backward is before the first
            first = (live.now, live.peak)
            size_classes["backward"] = dict(live.class_peak)
        size_classes["backward_from_first_gradient"] = dict(live.class_peak)
        return StepFigures(
            saved,
            forward_end,
            first[1] - forward_end,
            first[0] - forward_end,
            live.peak - first[0],
            self.math_attention,
            size_classes,
            operators,
        )


def at_micro_batch(one: TraceLog, other: TraceLog, micro_batch: int) -> TraceLog | None:
    """The events of ``one``'s micro-step at ``micro_batch``: each count on the line through ``one``'s and
    ``other``'s (traces of the same micro-step at two micro-batches); None where the two did not see the
    same events in the same order, or a count would fall below zero."""
    if one.micro_batch == other.micro_batch or len(one.events) != len(other.events):
        return None
    if one.math_attention != other.math_attention:
        return None
    span = other.micro_batch - one.micro_batch
    steps = micro_batch - one.micro_batch
    events = []
    for a, b in zip(one.events, other.events, strict=True):
        counts = _COUNTS.get(a[0], ())
        if len(a) != len(b) or any(x != y for i, (x, y) in enumerate(zip(a, b)) if i not in counts):
            return None
        if not counts:
            events.append(a)
            continue
        event = list(a)
        for i in counts:
            growth, rest = divmod((b[i] - a[i]) * steps, span)
            if rest:
                return None
            event[i] = a[i] + growth
            if event[i] < 0:
                return None
        events.append(tuple(event))
    return TraceLog(micro_batch, tuple(events), one.math_attention)
