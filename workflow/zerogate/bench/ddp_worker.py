"""The same model, data and loop as zerogate.train.loop, under plain PyTorch DDP (gloo): the baseline of
zerogate.bench.ddp_vs_zero3. Accumulation micro-steps run under no_sync, so gradients are all-reduced
once per optimizer step, as DDP users do. Same command line as zerogate.train.loop (run by the launcher)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import set_seed

from zerogate.data.dataset import load_split
from zerogate.io import read_json
from zerogate.train.metrics import StepMetrics
from zerogate.model.build import build_model, planned_model_config
from zerogate.train.loop import RankBatches, parse_args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = read_json(args.run_spec)
    ds_config = read_json(args.ds_config)
    manifest = read_json(Path(args.dataset_dir) / "manifest.json")
    training = spec["training"]
    steps, accumulation = training["optimizer_steps"], ds_config["gradient_accumulation_steps"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    set_seed(training["seed"])
    model = build_model(planned_model_config(spec["model"], manifest["settings"], manifest["eos_token_id"]))
    ddp = DistributedDataParallel(model)
    optimizer_settings = ds_config["optimizer"]["params"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=optimizer_settings["lr"], betas=tuple(optimizer_settings["betas"]),
                                  weight_decay=optimizer_settings.get("weight_decay", 0.0))
    batches = RankBatches(load_split(Path(args.dataset_dir) / "train.parquet"), world, rank,
                          ds_config["train_micro_batch_size_per_gpu"], accumulation, training["seed"])
    out = Path(args.out_dir)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    metrics = StepMetrics(out / "metrics" / f"rank{rank}.jsonl", rank, torch.device("cpu"))
    started = time.perf_counter()
    for step in range(steps):
        metrics.start_step()
        loss_sum = torch.zeros(())
        for micro in range(accumulation):
            batch = batches.get(step, micro)
            if micro < accumulation - 1:
                with ddp.no_sync():
                    loss = ddp(**batch).loss / accumulation
                    loss.backward()
            else:
                loss = ddp(**batch).loss / accumulation
                loss.backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), ds_config["gradient_clipping"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(loss_sum)
        metrics.end_step(step + 1, loss_sum.item() / world, None, optimizer_settings["lr"], 0, accumulation)
    metrics.close()
    dist.barrier()
    if rank == 0:
        (out / "summary.json").write_text(json.dumps({"wall_time(s)": time.perf_counter() - started}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
