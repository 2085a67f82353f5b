"""Communication volume per scheme, measured: every scheme of zerogate.plan.comms.SCHEMES in one launched world.

Launched once by DeepSpeed's launcher (rule measure_comms_volume, through zerogate.train.launch):

    python -m zerogate.train.launch --run-spec RUN_SPEC --log LOG --module zerogate.train.comms_volume -- \
        --ds-config DS_CONFIG --dataset-dir DATASET --out-dir OUT

For each scheme and for accumulation 1 and the rendered config's, a fresh model and engine (the rendered
config with zerogate.plan.comms.measurement_config's overrides), a few warm-up optimizer steps, then a few
measured ones. DeepSpeed schemes are recorded by DeepSpeed's comms logger (deepspeed.comm, the config's
"comms_logger" block): per record name and message size, the number of calls. The logger synchronises
every collective, which is why these are short runs of their own, never the timed run. Torch DDP (model
in DistributedDataParallel, no_sync during accumulation) is recorded by a DDP communication hook that
counts the gradient buckets it all-reduces, and by counting DDP's buffer broadcasts before the forward
(DistributedDataParallel._distributed_broadcast_coalesced, the one call that sends them).

Each rank writes OUT/<scheme>/g<accumulation>/rank<r>.json: the records of initialisation, warm-up and the
measured steps separately, the model's parameter counts (zerogate.plan.ledger.count_parameters, as the
planner counts them) and the settings the theory needs. A scheme that fails is written as not run with the
reason, on every rank, and the next scheme runs. Host-device copies are not collectives: on the CPU
accelerator there are none (host and device memory are the same), so none are recorded; on GPUs they
are not counted yet, which the record says.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import deepspeed
import psutil
import torch
import torch.distributed as dist
from deepspeed import comm as ds_comm
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from transformers import set_seed

from zerogate.data.dataset import load_split
from zerogate.io import read_json, write_json
from zerogate.units import GIB
from zerogate.model.build import load_for_training
from zerogate.plan.comms import DDP, SCHEMES, accumulations, measurement_config
from zerogate.plan.ledger import count_parameters, setup_from_config
from zerogate.train import deepspeed_adapter as ds
from zerogate.train.heap import release_freed_memory
from zerogate.train.loop import RankBatches, rank_arguments

WARMUP_STEPS = 1
# ZeRO-3 records its fetch trace in the first micro-step and checks it across ranks at the end of the second
# (partitioned_param_coordinator: assert_ints_same_as_other_ranks, a few small broadcasts); from then on every
# micro-step is alike. So warm-up covers at least two micro-steps: two optimizer steps at accumulation 1.
WARMUP_MICRO_STEPS = 2
MEASURED_STEPS = 1  # the volume is deterministic: one step says it; more only cost time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = rank_arguments(__doc__, "where <scheme>/g<accumulation>/rank<r>.json go")
    parser.add_argument("--warmup-steps", type=int, default=WARMUP_STEPS)
    parser.add_argument("--measured-steps", type=int, default=MEASURED_STEPS)
    parser.add_argument("--schemes", nargs="*", default=list(SCHEMES), choices=SCHEMES)
    return parser.parse_args(argv)


def logger_records() -> list[dict[str, Any]]:
    """The comms logger's records since its last reset: record name, message bytes, calls."""
    raw = ds_comm.comms_logger.get_raw_data()
    return [{"name": name, "msg_bytes": int(size), "calls": int(values[0])}
            for name, sizes in raw.items() for size, values in sizes.items()]


class DdpRecorder:
    """Counts what torch DDP sends: gradient buckets (a communication hook around the default all-reduce)
    and buffer broadcasts (DDP's one broadcast method, wrapped on this instance)."""

    def __init__(self, ddp: DistributedDataParallel):
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

    def take(self) -> list[dict[str, Any]]:
        taken = [{"name": name, "msg_bytes": size, "calls": calls} for (name, size), calls in self.records.items()]
        self.records = {}
        return taken


def run_deepspeed(config: dict[str, Any], spec: dict[str, Any], manifest: dict[str, Any], batches: RankBatches,
                  steps: tuple[int, int]) -> dict[str, Any]:
    accumulation = config["gradient_accumulation_steps"]
    ds_comm.comms_logger.reset_data()
    model = load_for_training(manifest["model"], spec["model"], manifest, config)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    phases = {"init": logger_records()}
    engine.train()
    step = 0
    for phase, count in zip(("warmup", "measured"), steps):
        ds_comm.comms_logger.reset_data()
        for _ in range(count):
            for micro in range(accumulation):
                loss = engine(**batches.get(step, micro)).loss
                engine.backward(loss)
                engine.step()  # DeepSpeed counts micro-steps; the last one is the boundary
            step += 1
        phases[phase] = logger_records()
    engine.destroy()
    ds.forget_zero3_engines()  # else DeepSpeed's module-level state keeps this engine alive (and its memory)
    return phases


def run_ddp(config: dict[str, Any], spec: dict[str, Any], manifest: dict[str, Any], batches: RankBatches,
            steps: tuple[int, int]) -> dict[str, Any]:
    accumulation = config["gradient_accumulation_steps"]
    model = load_for_training(manifest["model"], spec["model"], manifest, config)
    ddp = DistributedDataParallel(model)
    recorder = DdpRecorder(ddp)
    settings = config["optimizer"]["params"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], betas=tuple(settings["betas"]),
                                  weight_decay=settings.get("weight_decay", 0.0))
    phases: dict[str, Any] = {"init": None}  # DDP's constructor broadcasts through torch directly: not counted
    step = 0
    for phase, count in zip(("warmup", "measured"), steps):
        recorder.take()
        for _ in range(count):
            for micro in range(accumulation):
                batch = batches.get(step, micro)
                if micro < accumulation - 1:
                    with ddp.no_sync():  # accumulate locally; reduce once, in the last micro-step
                        (ddp(**batch).loss / accumulation).backward()
                else:
                    (ddp(**batch).loss / accumulation).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config["gradient_clipping"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
        phases[phase] = recorder.take()
    return phases


def model_facts(rendered: dict[str, Any], spec: dict[str, Any], manifest: dict[str, Any], world: int) -> tuple[dict[str, Any], int]:
    """The model's parameter counts (count_parameters, as the planner counts them) and its buffers' bytes
    (what DDP broadcasts before a synchronised forward), from the model as training builds it."""
    config = measurement_config(rendered, "zero0", 1, world)
    model = load_for_training(manifest["model"], spec["model"], manifest, config)
    facts = dataclasses.asdict(count_parameters(model.config)), sum(b.numel() * b.element_size() for b in model.buffers())
    del model
    return facts


def theory_settings(config: dict[str, Any], setup: Any) -> dict[str, Any]:
    """The settings zerogate.plan.comms.theory takes, as DeepSpeed resolves them (its own config class)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = DeepSpeedZeroConfig(**config.get("zero_optimization", {}))
    return {"persistence_threshold": setup.persistence_threshold, "reduce_bucket_elements": int(zero.reduce_bucket_size),
            "prefetch_bucket_elements": int(zero.prefetch_bucket_size),
            "max_reuse_distance": int(zero.max_reuse_distance), "leaf_blocks": setup.leaf_blocks,
            "multi_rank_bucket_allreduce": bool(zero.use_multi_rank_bucket_allreduce),
            "gradient_clipping": float(config.get("gradient_clipping", 0.0))}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = read_json(args.run_spec)
    rendered = read_json(args.ds_config)
    manifest = read_json(Path(args.dataset_dir) / "manifest.json")
    deepspeed.init_distributed(dist_backend=spec["backend"])
    rank, world = dist.get_rank(), dist.get_world_size()
    ds_comm.configure(enabled=True, prof_all=True, verbose=False, debug=False)
    split = load_split(Path(args.dataset_dir) / "train.parquet")
    counts, buffers = model_facts(rendered, spec, manifest, world)
    for scheme in args.schemes:
        for accumulation in accumulations(rendered):
            steps = (max(args.warmup_steps, math.ceil(WARMUP_MICRO_STEPS / accumulation)), args.measured_steps)
            config = measurement_config(rendered, scheme, accumulation, world)
            batches = RankBatches(split, world, rank, config["train_micro_batch_size_per_gpu"], accumulation,
                                  spec["training"]["seed"])
            set_seed(spec["training"]["seed"])
            started = time.perf_counter()
            error = None
            try:
                phases = (run_ddp if scheme == DDP else run_deepspeed)(config, spec, manifest, batches, steps)
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
            setup = setup_from_config(config, spec, manifest["seq_len"])  # the ledger's reading of the config
            write_json(Path(args.out_dir) / scheme / f"g{accumulation}" / f"rank{rank}.json", {
                "scheme": scheme, "accumulation": accumulation, "rank": rank, "world_size": world,
                "status": "not_run" if error else "run", "reason": error,
                "warmup_steps": steps[0], "measured_steps": steps[1],
                "seconds": time.perf_counter() - started,
                "rss_after(GiB)": psutil.Process().memory_info().rss / GIB,  # what the scheme left behind
                "recorder": "ddp_comm_hook" if scheme == DDP else "deepspeed_comms_logger",
                "phases": phases,
                "counts": counts,
                "buffer_bytes": buffers,
                "dtype": setup.dtype, "dtype_bytes": setup.dtype_bytes,
                "theory_settings": theory_settings(config, setup),
                "accelerator": spec["accelerator"],
                "host_device_copies": ({"counted": False, "reason": "CPU accelerator: host and device memory are the "
                                        "same, offload copies no data across a link"} if spec["accelerator"] == "cpu"
                                       else {"counted": False, "reason": "not instrumented on GPUs yet"}),
                "ds_config": config,
            })
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
