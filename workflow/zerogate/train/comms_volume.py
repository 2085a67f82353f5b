"""Communication volume per scheme, measured: every scheme the planning side lists, in one launched world.

Launched once by DeepSpeed's launcher (rule measure_comms_volume, through zerogate.runtime.launch):

    python -m zerogate.runtime.launch --run-spec RUN_SPEC --log LOG --module zerogate.train.comms_volume -- \
        --measurements comms/measurements.json --dataset-dir DATASET --out-dir OUT

For each measurement of comms/measurements.json (zerogate.predict.comms.measurements: every scheme at
accumulation 1 and at the rendered config's, each with its DeepSpeed config), a fresh model and engine
trained by the one loop (zerogate.runtime.loop): a few warm-up optimizer steps, then a few measured ones.
DeepSpeed schemes are recorded by DeepSpeed's comms logger (deepspeed.comm, the config's "comms_logger"
block): per record name and message size, the number of calls. The logger synchronises every collective,
which is why these are short runs of their own, never the timed run. Torch DDP (the DDP engine, no_sync
during accumulation) is recorded by a DDP communication hook that counts the gradient buckets it
all-reduces, and by counting DDP's buffer broadcasts before the forward
(DistributedDataParallel._distributed_broadcast_coalesced, the one call that sends them). torch FSDP2 is
recorded by a torch dispatch mode (Fsdp2Recorder, as torch's CommDebugMode sees collectives) that counts
every c10d collective FSDP2 issues and the functional all-reduce its sharded gradient norm ends in.

Each rank writes OUT/<scheme>/g<accumulation>/rank<r>.json (zerogate.contracts.comms.CommsRecord): the records
of initialisation, warm-up and the measured steps separately, the model's counts and the theory's settings
(from the measurement plan), and the model's buffers' bytes. A scheme that fails is written as not run with
the reason, on every rank, and the next scheme runs. Host-device copies are not collectives: on the CPU
accelerator there are none (host and device memory are the same), so none are recorded; on GPUs they are
not counted yet, which the record says.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist
from deepspeed import comm as ds_comm
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import set_seed

from zerogate.contracts.comms import CommsMeasurement, CommsPlan, CommsRecord, HostDeviceCopies, LoggedCalls
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.run import RunSpec
from zerogate.data.dataset import load_split
from zerogate.model.build import load_for_training
from zerogate.runtime import loop
from zerogate.runtime.engines import build_engine
from zerogate.runtime.heap import release_freed_memory
from zerogate.runtime.process_exit import exit_without_teardown
from zerogate.train.loop import rank_arguments, start_distributed
from zerogate.units import GIB

WARMUP_STEPS = 1
# ZeRO-3 records its fetch trace in the first micro-step and checks it across ranks at the end of the second
# (partitioned_param_coordinator: assert_ints_same_as_other_ranks, a few small broadcasts); from then on every
# micro-step is alike. So warm-up covers at least two micro-steps: two optimizer steps at accumulation 1.
WARMUP_MICRO_STEPS = 2
MEASURED_STEPS = 1  # the volume is deterministic: one step says it; more only cost time
RECORDERS = {"deepspeed": "deepspeed_comms_logger", "ddp": "ddp_comm_hook", "fsdp2": "torch_dispatch_mode"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = rank_arguments(__doc__, "where <scheme>/g<accumulation>/rank<r>.json go")
    parser.add_argument(
        "--measurements", required=True, help="comms/measurements.json (plan_comms_measurements)"
    )
    parser.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS)
    parser.add_argument("--measured-steps", type=int, default=MEASURED_STEPS)
    parser.add_argument("--schemes", nargs="*", help="only these schemes (default: every one planned)")
    return parser.parse_args(argv)


def logger_records() -> list[LoggedCalls]:
    """The comms logger's records since its last reset: record name, message bytes, calls."""
    raw = ds_comm.comms_logger.get_raw_data()
    return [
        LoggedCalls(name=name, msg_bytes=int(size), calls=int(values[0]))
        for name, sizes in raw.items()
        for size, values in sizes.items()
    ]


class DdpRecorder:
    """Counts what torch DDP sends: gradient buckets (a communication hook around the default all-reduce)
    and buffer broadcasts (DDP's one broadcast method, wrapped on this instance)."""

    def __init__(self, ddp: Any):
        self.records: dict[tuple[str, int], int] = {}
        ddp.register_comm_hook(None, self._hook)
        broadcast = ddp._distributed_broadcast_coalesced

        def counted_broadcast(tensors: Any, buffer_size: int, authoritative_rank: int = 0) -> None:
            self._add("broadcast", sum(t.numel() * t.element_size() for t in tensors))
            broadcast(tensors, buffer_size, authoritative_rank)

        ddp._distributed_broadcast_coalesced = counted_broadcast

    def _add(self, name: str, size: int) -> None:
        self.records[(name, size)] = self.records.get((name, size), 0) + 1

    # No annotations: DDP checks the hook's (with postponed annotations they are strings).
    def _hook(self, state, bucket):  # noqa: ANN001
        buffer = bucket.buffer()
        self._add("all_reduce", buffer.numel() * buffer.element_size())
        return allreduce_hook(state, bucket)

    def take(self) -> list[LoggedCalls]:
        taken = [
            LoggedCalls(name=name, msg_bytes=size, calls=calls)
            for (name, size), calls in self.records.items()
        ]
        self.records = {}
        return taken


# The collectives Fsdp2Recorder sees (c10d's in-place ops, as dist.* issues them; the functional ones DTensor
# issues) -> (the comms logger's record name, which argument's bytes it logs: the convention
# zerogate.predict.comms.logged_tensor_bytes reads, the rank's partition for the gathers, the full tensor
# else).
DISPATCHED_COLLECTIVES: dict[str, tuple[str, int]] = {
    "c10d._allgather_base_": ("all_gather_into_tensor", 1),  # (output, input)
    "c10d._reduce_scatter_base_": ("reduce_scatter_tensor", 1),  # (output, input)
    "c10d.allreduce_": ("all_reduce", 0),  # (tensors, ...)
    "c10d.broadcast_": ("broadcast", 0),
    "_c10d_functional.all_reduce": ("all_reduce", 0),
    "_c10d_functional.all_gather_into_tensor": ("all_gather_into_tensor", 0),
    "_c10d_functional.reduce_scatter_tensor": ("reduce_scatter_tensor", 0),
    "_c10d_functional.broadcast": ("broadcast", 0),
}
# Namespaces whose ops are collectives: an op there not in DISPATCHED_COLLECTIVES is kept under its own name
# (the analysis counts it as a kind with no volume definition, never as zero), except their helpers, which
# send nothing (waiting for a functional collective, wrapping its result for autograd).
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional")
NOT_COLLECTIVES = ("_c10d_functional.wait_tensor", "_c10d_functional._wrap_tensor_autograd")


def tensor_bytes(value: Any) -> int:
    """Bytes of a tensor, or of a list of tensors (c10d's in-place ops take lists)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return sum(tensor_bytes(v) for v in value) if isinstance(value, (list, tuple)) else 0


class Fsdp2Recorder(TorchDispatchMode):
    """Counts what torch FSDP2 sends: each collective op dispatched while it is active, by name and bytes.
    A call on DTensors is handed back (NotImplemented) so DTensor desugars it first and its collectives
    reach this mode as plain ops, as torch's CommDebugMode does."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[tuple[str, int], int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        if getattr(func, "namespace", None) in COLLECTIVE_NAMESPACES:
            op = f"{func.namespace}.{func._opname}"
            name, argument = DISPATCHED_COLLECTIVES.get(op, (op, 0))
            if op not in NOT_COLLECTIVES:
                key = (name, tensor_bytes(args[argument]) if args else 0)
                self.records[key] = self.records.get(key, 0) + 1
        return func(*args, **(kwargs or {}))

    def take(self) -> list[LoggedCalls]:
        taken = [
            LoggedCalls(name=name, msg_bytes=size, calls=calls)
            for (name, size), calls in self.records.items()
        ]
        self.records = {}
        return taken


def measure(
    entry: CommsMeasurement,
    spec: RunSpec,
    manifest: DatasetManifest,
    batches: loop.RankBatches,
    steps: tuple[int, int],
) -> dict[str, list[LoggedCalls] | None]:
    """One scheme's phases (init, warm-up, measured), trained by the one loop."""
    config, accumulation = entry.ds_config, entry.accumulation
    engine_name = entry.engine
    built_for = config if engine_name == "deepspeed" else {**config, "zero_optimization": {"stage": 0}}
    ds_comm.comms_logger.reset_data()
    fsdp2 = Fsdp2Recorder() if engine_name == "fsdp2" else None
    with fsdp2 or contextlib.nullcontext():
        engine = build_engine(engine_name, lambda: load_for_training(spec, manifest, built_for), config)
    recorder = DdpRecorder(engine.ddp) if engine_name == "ddp" else fsdp2
    # DDP's constructor broadcasts through torch directly: not counted.
    phases: dict[str, list[LoggedCalls] | None] = {
        "init": None if engine_name == "ddp" else fsdp2.take() if fsdp2 else logger_records()
    }
    engine.train()
    step = 0
    for phase, count in zip(("warmup", "measured"), steps):
        if recorder:
            recorder.take()
        ds_comm.comms_logger.reset_data()
        with fsdp2 or contextlib.nullcontext():
            step = loop.run(engine, batches, accumulation, step, step + count)
        phases[phase] = recorder.take() if recorder else logger_records()
    engine.destroy()  # else DeepSpeed's module-level state keeps this engine alive (and its memory)
    return phases


def buffer_bytes(spec: RunSpec, manifest: DatasetManifest, config: dict[str, Any]) -> int:
    """The model's buffers' bytes (what DDP broadcasts before a synchronised forward), as training builds
    it."""
    model = load_for_training(spec, manifest, {**config, "zero_optimization": {"stage": 0}})
    found = sum(b.numel() * b.element_size() for b in model.buffers())
    del model
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = RunSpec.read(args.run_spec)
    plan = CommsPlan.read(args.measurements)
    manifest = DatasetManifest.read(Path(args.dataset_dir) / "manifest.json")
    rank, world = start_distributed(spec)  # as the training run's ranks start theirs
    ds_comm.configure(enabled=True, prof_all=True, verbose=False, debug=False)
    split = load_split(Path(args.dataset_dir) / "train.parquet")
    buffers = buffer_bytes(spec, manifest, plan.measurements[0].ds_config)
    copies = (
        HostDeviceCopies(
            counted=False,
            reason="CPU accelerator: host and device memory are the same, offload "
            "copies no data across a link",
        )
        if spec.accelerator == "cpu"
        else HostDeviceCopies(counted=False, reason="not instrumented on GPUs yet")
    )
    for entry in plan.measurements:
        if args.schemes and entry.scheme not in args.schemes:
            continue
        accumulation = entry.accumulation
        steps = (max(args.warmup_steps, math.ceil(WARMUP_MICRO_STEPS / accumulation)), args.measured_steps)
        batches = loop.RankBatches(
            split,
            world,
            rank,
            int(entry.ds_config["train_micro_batch_size_per_gpu"]),
            accumulation,
            spec.training.seed,
        )
        set_seed(spec.training.seed)
        started = time.perf_counter()
        error = None
        try:
            phases = measure(entry, spec, manifest, batches, steps)
        except Exception as exc:  # recorded as not run, with the reason; the next scheme still runs
            traceback.print_exc()
            phases, error = {}, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        # Both ranks agree on the outcome: a scheme that failed on one rank is not run on every rank.
        failed = torch.tensor([0 if error is None else 1], dtype=torch.int64)
        dist.all_reduce(failed)
        if failed.item() and error is None:
            error = "failed on another rank (see its record)"
        # Each scheme built a whole model and engine: hand their memory back before the next one, or the
        # schemes' garbage adds up (cpu-smollm2 was killed for memory at its eleventh scheme).
        release_freed_memory()
        CommsRecord(
            scheme=entry.scheme,
            accumulation=accumulation,
            rank=rank,
            world_size=world,
            status="not_run" if error else "run",
            reason=error,
            warmup_steps=steps[0],
            measured_steps=steps[1],
            seconds=time.perf_counter() - started,
            rss_after_gib=psutil.Process().memory_info().rss / GIB,  # what the scheme left behind
            recorder=RECORDERS[entry.engine],
            phases=phases,
            counts=plan.counts,
            buffer_bytes=buffers,
            dtype=entry.dtype,
            dtype_bytes=entry.dtype_bytes,
            theory_settings=entry.theory_settings,
            accelerator=spec.accelerator,
            host_device_copies=copies,
            ds_config=entry.ds_config,
        ).write(Path(args.out_dir) / entry.scheme / f"g{accumulation}" / f"rank{rank}.json")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())
