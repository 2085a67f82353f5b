"""A benchmark to read, not a test: each model config's trace at larger micro-batches, traced and read off
the line through two smaller ones (zerogate.predict.trace_log.at_micro_batch), side by side, with the wall
time of each way and whether every figure is the same.

    python -m zerogate.predict.trace_check                      # every config under config/models
    python -m zerogate.predict.trace_check config/models/llama-3-8b.json --seq-len 512 --micro-batches 4 7

For each config, attention the model supports, and activation checkpointing off and on: the micro-step is
traced at each micro-batch with nothing kept from before (zerogate.predict.trace.forget_traces), then again
after a trace at the smaller of zerogate.predict.trace.BASE_MICRO_BATCHES, as a micro-batch search runs it.
A row prints ``same`` when the two ActivationTraces are equal field for field, else the fields that differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from zerogate.config.model_data import ATTENTIONS
from zerogate.errors import InputError
from zerogate.model.hf_config import load_config, shape_of
from zerogate.predict.setup import TORCH_DTYPES
from zerogate.predict.trace import (
    BASE_MICRO_BATCHES,
    STEP_COUNTS,
    ActivationTrace,
    MicroStep,
    forget_traces,
    trace_micro_step,
)

MODELS = Path("config/models")
MIB = 2**20


@dataclass(frozen=True)
class Compared:
    """One micro-batch: the fields in which its trace read off the line differs from its direct trace (none:
    the same), and the direct trace's wall seconds."""

    micro_batch: int
    differ: list[str]
    direct_seconds: float


@dataclass(frozen=True)
class LineRun:
    """The traces read off the line for every micro-batch: wall seconds (its base traces included), and the
    micro-steps read off the line and traced (two per trace scaled from two layer counts)."""

    seconds: float
    on_the_line: int
    traced: int


def traced_each_way(config, step: MicroStep, micro_batches: list[int]) -> tuple[list[Compared], LineRun]:
    """``step`` at each of ``micro_batches`` traced directly, then read off the line."""
    direct: dict[int, tuple[ActivationTrace, float]] = {}
    for micro_batch in micro_batches:
        forget_traces()
        start = time.perf_counter()
        direct[micro_batch] = (
            trace_micro_step(config, dataclasses.replace(step, micro_batch=micro_batch)),
            time.perf_counter() - start,
        )
    forget_traces()
    start = time.perf_counter()
    before = dataclasses.replace(STEP_COUNTS)
    trace_micro_step(config, dataclasses.replace(step, micro_batch=BASE_MICRO_BATCHES[0]))
    lines = {m: trace_micro_step(config, dataclasses.replace(step, micro_batch=m)) for m in micro_batches}
    run = LineRun(
        time.perf_counter() - start,
        STEP_COUNTS.on_the_line - before.on_the_line,
        STEP_COUNTS.traced - before.traced,
    )
    forget_traces()
    compared = []
    for micro_batch, (trace, seconds) in direct.items():
        line = lines[micro_batch]
        differ = [
            f.name for f in dataclasses.fields(trace) if getattr(trace, f.name) != getattr(line, f.name)
        ]
        compared.append(Compared(micro_batch, differ, seconds))
    return compared, run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zerogate.predict.trace_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("configs", nargs="*", help="config.json files (default: all under config/models)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[4, 5, 8])
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), default="fp16")
    args = parser.parse_args(argv)
    paths = [Path(c) for c in args.configs] or sorted(MODELS.glob("*.json"))
    same = differ = on_the_line = traced = 0
    direct_s = line_s = 0.0
    for path in paths:
        try:
            config = load_config(path)
            seq_len = min(args.seq_len, shape_of(config).max_positions)
        except InputError as error:  # a config the planner does not load or size either
            print(f"{path.name}: not traced ({error})")
            continue
        for attention in ATTENTIONS:  # one the model does not run is refused, and printed so
            for checkpointing in (False, True):
                step = MicroStep(1, seq_len, args.dtype, attention, checkpointing)
                try:
                    compared, run = traced_each_way(config, step, args.micro_batches)
                except (ValueError, RuntimeError) as error:  # a model the trace refuses
                    why = str(error).split(". ")[0]
                    switch = "on" if checkpointing else "off"
                    print(f"{path.name} {attention} checkpointing={switch}: not traced ({why})")
                    continue
                direct_s += sum(c.direct_seconds for c in compared)
                line_s += run.seconds
                on_the_line += run.on_the_line
                traced += run.traced
                for c in compared:
                    same += not c.differ
                    differ += bool(c.differ)
                    verdict = "same" if not c.differ else "DIFFERS: " + ", ".join(c.differ)
                    print(
                        f"{path.name} {attention} checkpointing={'on' if checkpointing else 'off'} "
                        f"micro-batch {c.micro_batch}: {verdict} (traced in {c.direct_seconds:.2f} s)"
                    )
                print(
                    f"  read off the line: {run.seconds:.2f} s, {run.on_the_line} micro-steps on the line, "
                    f"{run.traced} traced"
                )
    print(
        f"summary: {same} same, {differ} differ; traced directly {direct_s:.1f} s; read off the line "
        f"{line_s:.1f} s ({on_the_line} micro-steps on the line, {traced} traced, the base micro-batches "
        f"{BASE_MICRO_BATCHES} and any the line could not give)"
    )


if __name__ == "__main__":
    main()
