"""The training run: a causal LM fine-tuned with DeepSpeed ZeRO under the rendered config.

Launched by DeepSpeed's launcher, one process per rank (the ``train`` rule does this via
``python -m zerogate.launch``, which picks the rank count and environment from run_spec.json):

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 deepspeed --num_gpus 2 --module zerogate.train \
        --run-spec results/cpu-tiny/<machine>/deepspeed/run_spec.json \
        --ds-config results/cpu-tiny/<machine>/deepspeed/ds_config.json \
        --dataset-dir results/cpu-tiny/<machine>/dataset --out-dir results/cpu-tiny/<machine>/train
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
import deepspeed
import numpy as np
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator
from tqdm import tqdm
from transformers import set_seed

from zerogate.dataset import EncodedSplit, load_split
from zerogate.entry import write_json
from zerogate.held import held_bytes
from zerogate.metrics import StepMetrics
from zerogate.evaluate import Evaluator  # issue 6
from zerogate.model import load_for_training  # issue 6
from zerogate.provenance import git_state


class RankBatches:
    """The micro-batches of one rank, in an order fixed by the seed alone.

    Global sample position p = ((step * accumulation + micro) * world + rank) * micro_batch + j walks
    through a fresh seeded permutation per epoch, so every rank sees distinct samples and a run can be
    replayed (or resumed) from the step number.
    """

    def __init__(self, split: EncodedSplit, world: int, rank: int, micro_batch: int, accumulation: int, seed: int):
        self.split, self.world, self.rank = split, world, rank
        self.micro_batch, self.accumulation, self.seed = micro_batch, accumulation, seed
        self.rows = split.input_ids.shape[0]
        self._perms: dict[int, np.ndarray] = {}

    def _row(self, position: int) -> int:
        epoch, offset = divmod(position, self.rows)
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng(self.seed + epoch).permutation(self.rows)}
        return int(self._perms[epoch][offset])

    def get(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        first = ((step * self.accumulation + micro) * self.world + self.rank) * self.micro_batch
        rows = [self._row(first + j) for j in range(self.micro_batch)]
        return {
            "input_ids": torch.from_numpy(self.split.input_ids[rows]),
            "attention_mask": torch.from_numpy(self.split.attention_mask[rows]),
            "labels": torch.from_numpy(self.split.labels[rows]),
        }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-spec", required=True, help="run_spec.json from render_deepspeed_config")
    parser.add_argument("--ds-config", required=True, help="ds_config.json from render_deepspeed_config")
    parser.add_argument("--dataset-dir", required=True, help="directory written by prepare_dataset")
    parser.add_argument("--out-dir", required=True, help="where metrics/rank<N>.jsonl and summary.json go")
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = json.loads(Path(args.run_spec).read_text())
    ds_config = json.loads(Path(args.ds_config).read_text())
    manifest = json.loads((Path(args.dataset_dir) / "manifest.json").read_text())
    training = spec["training"]
    steps, accumulation = training["optimizer_steps"], ds_config["gradient_accumulation_steps"]
    micro_batch = ds_config["train_micro_batch_size_per_gpu"]

    deepspeed.init_distributed(dist_backend=spec["backend"])
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != spec["world_size"]:
        raise SystemExit(f"zerogate: launched {world} ranks but run_spec.json asks for {spec['world_size']}")
    set_seed(training["seed"])  # same seed on every rank: zero.Init must build identical weights

    model = load_for_training(manifest["model"], spec["model"], manifest, ds_config)  # issue 6: any model source
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    parameters = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())

    batches = RankBatches(load_split(Path(args.dataset_dir) / "train.parquet"), world, rank, micro_batch, accumulation, training["seed"])
    out_dir = Path(args.out_dir)
    (out_dir / "metrics").mkdir(parents=True, exist_ok=True)
    metrics = StepMetrics(out_dir / "metrics" / f"rank{rank}.jsonl", rank, engine.device, training["warmup_steps_excluded"])
    evaluator = Evaluator(engine, args.dataset_dir, out_dir, manifest, steps, ds_config["zero_optimization"]["stage"] == 3)  # issue 6
    progress = tqdm(total=steps, desc="train", unit="step", disable=rank != 0, mininterval=5, ncols=100, file=sys.stderr)
    started = time.perf_counter()
    engine.train()

    for step in range(steps):
        if evaluator.maybe_run(step):  # issue 6: validation before step 1 and every N steps,
            metrics.reset_window()  # kept out of the next step's time and memory peak
        get_accelerator().synchronize()  # the step's clock starts with the device idle
        metrics.start_step()
        lr = engine.get_lr()[0]  # the rate this step's update uses (the scheduler moves at the boundary)
        loss_sum = torch.zeros((), device=engine.device)
        tokens = 0
        for micro in range(accumulation):
            batch = {k: v.to(engine.device) for k, v in batches.get(step, micro).items()}
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()  # DeepSpeed applies the optimizer update only at the accumulation boundary
            loss_sum += loss.detach()
            tokens += int(batch["attention_mask"].sum())
        # One collective per optimizer step: the loss averaged over micro-steps and ranks. The .item()
        # that follows is the step's host sync point, so the step time below includes all device work.
        dist.all_reduce(loss_sum)
        mean_loss = loss_sum.item() / (accumulation * world)
        grad_norm = engine.get_global_grad_norm()
        record = metrics.end_step(
            step + 1, mean_loss, None if grad_norm is None else float(grad_norm), lr, tokens, accumulation
        )
        progress.set_postfix(loss=f"{mean_loss:.3f}", s_per_step=f"{record['step_time(s)']:.2f}", refresh=False)
        progress.update(1)

    progress.close()
    evaluator.run(steps, "after")  # issue 6: validation loss (and exact match) after the last step
    metrics.close()
    # What this rank holds, for the ledger-vs-measured check (issue 3): zerogate.held.held_bytes.
    write_json(out_dir / "metrics" / f"held_bytes_rank{rank}.json", {"rank": rank, "world_size": world, **held_bytes(engine)})
    dist.barrier()  # every rank's metrics file is complete before the summary says so
    if rank == 0:
        write_json(
            out_dir / "summary.json",
            {
                "completed_steps": steps,
                "world_size": world,
                "parameters": int(parameters),
                "wall_time(s)": time.perf_counter() - started,
                "dtype": spec["dtype"],
                "accelerator": spec["accelerator"],
                "git": git_state(Path.cwd()),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
