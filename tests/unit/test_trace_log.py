"""A traced micro-step's events: the figures read from them, the same events at another micro-batch, and
a micro-batch search's traces read off the line equal to the traces themselves."""

import dataclasses

import pytest
from transformers import GPT2Config

from tests.unit.test_trace import S, V, llama_layer_bytes, llama_outside_bytes, tiny_llama
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.trace import STEP_COUNTS, MicroStep, forget_traces, record_step, trace_micro_step
from zerogate.predict.trace_log import (
    ALLOC,
    END,
    FIRST_GRADIENT,
    FORWARD_END,
    FREE,
    OP,
    SAVED,
    TraceLog,
    at_micro_batch,
)
from zerogate.runtime.heap import GLIBC_MMAP_THRESHOLD_MAX_BYTES

BIG = GLIBC_MMAP_THRESHOLD_MAX_BYTES + 1  # a mapped storage; smaller ones are the heap's


def test_the_figures_are_the_live_bytes_and_peaks_of_each_window_read_from_the_events():
    log = TraceLog(
        1,
        (
            (ALLOC, 0, 100),
            (SAVED, 100),
            (ALLOC, 1, BIG),
            (OP, "aten", "add", False, 300, 50),
            (OP, "aten", "mm", False, 999, 9),  # a product: not an operator of the tally
            (FREE, 0),
            (FORWARD_END,),  # alive: BIG; the forward's peak 100 + BIG
            (ALLOC, 2, 40),
            (FREE, 2),
            (ALLOC, 3, 10),
            (FIRST_GRADIENT,),  # alive: BIG + 10; the peak before it BIG + 40
            (ALLOC, 4, 70),
            (FREE, 1),
            (FIRST_GRADIENT,),  # only the first counts
            (END,),
            (ALLOC, 5, 10**12),  # after the end: not counted
        ),
        False,
    )
    figures = log.figures()
    assert figures.saved_bytes == 100
    assert figures.live_bytes_at_forward_end == BIG
    assert figures.transient_bytes == 40
    assert figures.at_first_gradient_change == 10
    assert figures.after_first_gradient_bytes == 70
    assert figures.size_classes == {
        "forward": {"heap": 100, "mapped": BIG},
        "backward": {"heap": 40, "mapped": BIG},
        "backward_from_first_gradient": {"heap": 80, "mapped": BIG},
    }
    assert figures.operators == OperatorTally(1, 0, {50: 300.0})


def test_without_a_gradient_the_whole_backward_is_before_the_first():
    figures = TraceLog(1, ((ALLOC, 0, 5), (FORWARD_END,), (ALLOC, 1, 7), (END,)), False).figures()
    assert figures.transient_bytes == figures.at_first_gradient_change == 7
    assert figures.after_first_gradient_bytes == 0


def samples(micro_batch: int) -> TraceLog:
    """A storage of 10 bytes and 8 a sample, saved and freed; an op moving 24 bytes a sample."""
    each = 8 * micro_batch
    events = (
        (ALLOC, 0, 10 + each),
        (SAVED, each),
        (OP, "aten", "mul", False, 3 * each, each // 2),
        (FREE, 0),
    )
    return TraceLog(micro_batch, events, False)


def test_the_events_at_a_third_micro_batch_are_on_the_line_through_two():
    assert at_micro_batch(samples(2), samples(3), 7) == samples(7)


@pytest.mark.parametrize(
    "changed",
    [
        ((ALLOC, 0, 24), (SAVED, 24), (OP, "aten", "add", False, 72, 6), (FREE, 0)),  # another op
        ((ALLOC, 0, 24), (SAVED, 24), (OP, "aten", "mul", False, 72, 6)),  # one event fewer
        ((ALLOC, 0, 24), (OP, "aten", "mul", False, 72, 6), (SAVED, 24), (FREE, 0)),  # another order
        ((ALLOC, 1, 24), (SAVED, 24), (OP, "aten", "mul", False, 72, 6), (FREE, 1)),  # another storage
        ((ALLOC, 0, 2), (SAVED, 24), (OP, "aten", "mul", False, 72, 6), (FREE, 0)),  # below zero at 7
    ],
)
def test_two_traces_that_saw_different_events_give_no_line(changed):
    two = TraceLog(2, ((ALLOC, 0, 16), (SAVED, 16), (OP, "aten", "mul", False, 48, 4), (FREE, 0)), False)
    assert at_micro_batch(two, TraceLog(3, changed, False), 7) is None
    assert at_micro_batch(two, dataclasses.replace(two, micro_batch=3, math_attention=True), 7) is None


def test_a_recorded_trace_gives_the_hand_counted_bytes():
    figures = record_step(tiny_llama(layers=2), MicroStep(1, S, "fp16", "eager")).figures()
    assert figures.saved_bytes == 2 * llama_layer_bytes(2, "eager") + llama_outside_bytes(2)


@pytest.mark.parametrize(
    ("config", "attention", "checkpointing"),
    [
        (tiny_llama(layers=3), "sdpa", False),
        (tiny_llama(layers=3), "eager", True),
        (GPT2Config(vocab_size=V, n_embd=64, n_layer=2, n_head=4, n_positions=64), "sdpa", False),  # dropout
    ],
)
def test_a_micro_batch_search_reads_its_larger_micro_batches_off_the_line_as_they_trace(
    config, attention, checkpointing
):
    steps = [MicroStep(m, S, "fp16", attention, checkpointing) for m in (1, 2, 4, 5, 8)]
    forget_traces()
    direct = {step.micro_batch: trace_micro_step(config, step) for step in steps[2:]}
    forget_traces()
    before = dataclasses.replace(STEP_COUNTS)
    searched = {step.micro_batch: trace_micro_step(config, step) for step in steps}
    forget_traces()
    assert {m: searched[m] for m in direct} == direct
    # Micro-batches 4, 5 and 8 off the line through 2 and 3, each from two layer counts; 1, 2 and 3 traced.
    assert (STEP_COUNTS.on_the_line - before.on_the_line, STEP_COUNTS.traced - before.traced) == (6, 6)
