"""The training run: a causal LM fine-tuned with DeepSpeed ZeRO under the rendered config.

Launched by DeepSpeed's launcher, one process per rank (the ``train`` rule does this via
``python -m zerogate.train.launch``, which picks the rank count and environment from run_spec.json):

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 deepspeed --num_gpus 2 --module zerogate.train.loop \
        --run-spec results/cpu-tiny/<machine>/deepspeed/run_spec.json \
        --ds-config results/cpu-tiny/<machine>/deepspeed/ds_config.json \
        --settings results/cpu-tiny/<machine>/train/settings.json \
        --dataset-dir results/cpu-tiny/<machine>/dataset --out-dir results/cpu-tiny/<machine>/train \
        --checkpoint-dir results/cpu-tiny/<machine>/checkpoints

Rerun after an interruption, it resumes from the newest complete checkpoint of the same configuration.
One optimizer step = one data window of ``gradient_accumulation_steps`` micro-batches per rank. Who does what:
metrics (zerogate.train.metrics), the per-step policy -- stabiliser verdicts, skip, rollback, abort, fault
injection (zerogate.train.policy, zerogate.train.stabiliser) --, checkpoints (zerogate.train.checkpoint), the
checkpoint and evaluation cadences (zerogate.config.settings), evaluation (zerogate.train.evaluate) and every
DeepSpeed internal (zerogate.train.deepspeed_adapter). The loop below only says in what order.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
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

from zerogate.config.settings import checkpoint_settings, stabiliser_settings
from zerogate.data.dataset import EncodedSplit, load_split
from zerogate.hashing import sha256_json
from zerogate.io import read_json, write_json
from zerogate.model.build import load_for_training
from zerogate.train.heap import release_freed_memory
from zerogate.provenance import git_state
from zerogate.train import checkpoint as ckpt
from zerogate.train import deepspeed_adapter as ds
from zerogate.train.evaluate import Evaluator
from zerogate.train.held import held_bytes
from zerogate.plan.probe import probe
from zerogate.train.nodes import rank_env_from_slurm
from zerogate.train.metrics import CollectiveClock, NoMetrics, StepMetrics, peak_flops, train_flops_per_token
from zerogate.train.nvml_sampler import NvmlSampler, nvml_query
from zerogate.train.policy import FaultInjector, StepPolicy, skip_reason
from zerogate.train.stabiliser import EventLog, Stabiliser, data_window


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


def rank_arguments(description: str | None, out_dir_help: str) -> argparse.ArgumentParser:
    """The arguments every module the launcher starts on each rank takes (zerogate.train.launch passes them)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-spec", required=True, help="run_spec.json from render_deepspeed_config")
    parser.add_argument("--ds-config", required=True, help="ds_config.json from render_deepspeed_config")
    parser.add_argument("--dataset-dir", required=True, help="directory written by prepare_dataset")
    parser.add_argument("--out-dir", required=True, help=out_dir_help)
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = rank_arguments(__doc__, "where metrics/rank<N>.jsonl, events.jsonl, summary.json go")
    parser.add_argument("--settings", required=True, help="train/settings.json: stabiliser and checkpoint settings")
    parser.add_argument("--checkpoint-dir", required=True, help="checkpoints; outside the rule's outputs")
    parser.add_argument("--no-metrics", action="store_true", help="metrics layer off (zerogate.bench.metrics_overhead)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = read_json(args.run_spec)
    ds_config = read_json(args.ds_config)
    settings = read_json(args.settings)
    manifest = read_json(Path(args.dataset_dir) / "manifest.json")
    training = spec["training"]
    stabiliser_cfg, checkpoints = stabiliser_settings(settings["stabiliser"]), checkpoint_settings(settings["checkpoint"])
    steps, accumulation = training["optimizer_steps"], ds_config["gradient_accumulation_steps"]
    micro_batch = ds_config["train_micro_batch_size_per_gpu"]
    # A checkpoint resumes only the run it came from: same DeepSpeed config, spec, data and stabiliser.
    fingerprint = sha256_json({"ds_config": ds_config, "run_spec": spec, "stabiliser": settings["stabiliser"],
                               "dataset": manifest.get("content_sha256")})

    # Ranks that DeepSpeed's slurm backend started with srun learn their rank from srun's variables. Over
    # several nodes a bounded collective timeout makes a dead node end the run instead of hanging it.
    os.environ.update(rank_env_from_slurm(os.environ))
    # Counts each rank's time blocked in collectives (metrics); installed before DeepSpeed keeps references.
    collectives = None if args.no_metrics else CollectiveClock().install()
    nodes = spec.get("nodes") or {}
    timeout = nodes.get("collective_timeout_s")
    deepspeed.init_distributed(dist_backend=spec["backend"],
                               **({"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}))
    rank, world = dist.get_rank(), dist.get_world_size()
    placement = {"node": rank // nodes["ranks_per_node"], "local_rank": int(os.environ.get("LOCAL_RANK", rank)),
                 "host": socket.gethostname()} if nodes else None
    if placement and placement["local_rank"] == 0:  # one fingerprint per node, beside the ranks' records
        write_json(Path(args.out_dir) / "metrics" / f"node{placement['node']}.json",
                   {"node": placement["node"], **probe(measure=False)})
    if world != spec["world_size"]:
        raise SystemExit(f"zerogate: launched {world} ranks but run_spec.json asks for {spec['world_size']}")
    if (stabiliser_cfg.inject or {}).get("rank", 0) >= world:  # an injection no rank would see tests nothing
        raise SystemExit(f"zerogate: error: {args.settings}: stabiliser.inject.rank: "
                         f"{stabiliser_cfg.inject['rank']} is not a rank of this run's {world}")
    set_seed(training["seed"])  # same seed on every rank: zero.Init must build identical weights

    # Any model source (shape numbers, HF directory, GGUF, hub cache), built or loaded under ZeRO-3's Init.
    model = load_for_training(manifest["model"], spec["model"], manifest, ds_config)
    config = model.config
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    parameters = ds.parameter_count(model)
    # Loading built the model whole before DeepSpeed partitioned it; glibc keeps those freed pages resident
    # unless trimmed, and the measured peak would count garbage (train/heap.py).
    release_freed_memory()

    batches = RankBatches(load_split(Path(args.dataset_dir) / "train.parquet"), world, rank, micro_batch, accumulation, training["seed"])
    out_dir, ckpt_root = Path(args.out_dir), Path(args.checkpoint_dir)
    metrics_file = out_dir / "metrics" / f"rank{rank}.jsonl"
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    events = EventLog(out_dir / "events.jsonl")
    eval_file = out_dir / "eval.jsonl"
    # Rank 0's run-level logs travel with each checkpoint, so a resumed run continues them.
    run_logs = [events.path, eval_file] if rank == 0 else []
    stabiliser = Stabiliser(stabiliser_cfg)
    policy = StepPolicy(stabiliser, events, rank, ds.fp16(engine), barrier=dist.barrier)
    faults = FaultInjector(stabiliser_cfg.inject, rank)
    skipped_windows: list[int] = []  # data windows a rollback took out of the run

    def save_checkpoint(step: int) -> None:
        staging = ckpt.staging_dir(ckpt_root, step)
        engine.save_checkpoint(str(staging), tag=ckpt.TAG, save_latest=False)
        ckpt.write_rank_files(staging, rank, {"skipped_windows": skipped_windows, "stabiliser": stabiliser.state()},
                              metrics_file, run_logs)
        dist.barrier()  # every rank's partitions are on disk before the checkpoint is called complete
        if rank == 0:
            ckpt.publish(ckpt_root, step, fingerprint, checkpoints.keep)
        dist.barrier()

    def restore(found: tuple[int, Path], with_events: bool) -> int:
        nonlocal skipped_windows
        step, path = found
        engine.load_checkpoint(str(path), tag=ckpt.TAG)
        # A rollback keeps the events that explain it; a resume puts them back as they were.
        logs = run_logs if with_events else [f for f in run_logs if f != events.path]
        loop = ckpt.restore_rank_files(path, rank, metrics_file, logs)
        skipped_windows = list(loop["skipped_windows"])
        rollbacks = stabiliser.rollbacks
        stabiliser.load_state(loop["stabiliser"])
        stabiliser.rollbacks = max(rollbacks, stabiliser.rollbacks)
        return step

    if rank == 0:
        for stale in ckpt.clear_stale(ckpt_root, fingerprint):
            print(f"zerogate: removed stale checkpoint {stale}", file=sys.stderr)
    dist.barrier()
    latest = ckpt.latest_checkpoint(ckpt_root, fingerprint)
    start_step = restore(latest, with_events=True) if latest else 0
    if latest:
        print(f"zerogate: rank {rank} resumed from {latest[1]} at step {start_step}", file=sys.stderr)
    elif rank == 0:
        events.path.unlink(missing_ok=True)
        eval_file.unlink(missing_ok=True)

    device_name = torch.cuda.get_device_name(engine.device) if spec["accelerator"] == "cuda" else None
    nvml = None
    if spec["accelerator"] == "cuda":
        query = nvml_query(engine.device.index or 0)
        nvml = NvmlSampler(query).start() if query else None
    metrics = (NoMetrics if args.no_metrics else StepMetrics)(
        metrics_file, rank, engine.device, append=latest is not None, placement=placement,
        flops_per_token=train_flops_per_token(int(parameters), config.num_hidden_layers, config.hidden_size, manifest["seq_len"]),
        peak_flops_per_s=peak_flops(device_name, spec["dtype"]), nvml=nvml, collectives=collectives,
    )
    evaluator = Evaluator(engine, args.dataset_dir, eval_file, manifest, steps, ds_config["zero_optimization"]["stage"] == 3)
    if not latest and stabiliser_cfg.policy == "rollback":
        save_checkpoint(0)  # rollback needs a good state to return to, even before the first interval
    progress = tqdm(total=steps, initial=start_step, desc="train", unit="step", disable=rank != 0, mininterval=5,
                    ncols=100, file=sys.stderr)
    started = time.perf_counter()
    engine.train()

    step = start_step
    while step < steps:
        if evaluator.maybe_run(step):  # validation before step 1 and every N steps, kept out of the
            metrics.reset_window()  # next step's time and memory peak
        get_accelerator().synchronize()  # the step's clock starts with the device idle
        metrics.start_step()
        window = data_window(step, skipped_windows)
        lr = engine.get_lr()[0]  # the rate this step's update uses (the scheduler moves at the boundary)
        loss_sum = torch.zeros((), device=engine.device)
        tokens = processed = 0
        for micro in range(accumulation):
            faults.slow_down(step)  # the `slow` injection: a straggler rank (tests; off by default)
            host_batch = batches.get(window, micro)
            batch = {k: v.to(engine.device) for k, v in host_batch.items()}
            loss = faults.poison(engine(**batch).loss, window, micro)
            engine.backward(loss)
            loss_sum += loss.detach()
            # Counted on the host copy: no device work or readback between micro-steps.
            tokens += int(host_batch["attention_mask"].sum())
            processed += host_batch["input_ids"].numel()
            if micro < accumulation - 1:
                engine.step()  # not the boundary: DeepSpeed only counts the micro-step
                metrics.micro_step_done()
        # The boundary. One collective per optimizer step, before the update: each rank's window loss in
        # its own slot, so every rank learns every rank's loss (a non-finite one stays in its slot). The
        # .tolist() is the step's one host sync, so the step time includes all device work.
        rank_losses = torch.zeros(world, device=engine.device, dtype=torch.float64)
        rank_losses[rank] = loss_sum / accumulation
        dist.all_reduce(rank_losses)
        losses = rank_losses.tolist()
        verdict = policy.before_update(losses)
        ds.boundary_step(engine, apply=verdict.ok)  # a bad window's update is dropped, counters advance
        metrics.micro_step_done()
        mean_loss = sum(losses) / world
        grad_norm = ds.global_grad_norm(engine) if verdict.ok else None
        verdict = policy.after_update(verdict, grad_norm, world)
        applied = verdict.ok and ds.update_applied(engine)
        if policy.settle(step + 1, verdict) == policy.CONTINUE:  # applied, or skipped by the policy
            if applied:
                stabiliser.accept(mean_loss)  # only applied steps make the spike detector's history
            metrics.end_step(step + 1, mean_loss, grad_norm, lr, tokens, accumulation, processed_tokens=processed,
                             extra={"data_window": window, "update_applied": applied,
                                    "skip_reason": skip_reason(verdict, applied), "loss_scale": ds.loss_scale(engine),
                                    "skipped_steps_deepspeed": ds.skipped_steps(engine)})
            step += 1
            progress.set_postfix(loss=f"{mean_loss:.3f}", refresh=False)
            progress.update(1)
            if checkpoints.due(step, steps):
                save_checkpoint(step)
            continue
        # Rollback: back to the newest good checkpoint; the offending data window is never trained on.
        found = ckpt.latest_checkpoint(ckpt_root, fingerprint)
        if found is None:
            policy.no_checkpoint(step + 1, verdict)
        stabiliser.rollbacks += 1
        step = restore(found, with_events=False)
        skipped_windows = sorted({*skipped_windows, window})
        metrics.reopen()  # the metrics file was put back as it was at the checkpoint
        progress.n = step
        print(f"zerogate: rank {rank} rolled back to step {step}; data window {window} skipped", file=sys.stderr)

    progress.close()
    evaluator.run(steps, "after")  # validation loss (and exact match) after the last step
    metrics.close()
    # What this rank holds, for the ledger-vs-measured check (zerogate.train.held.held_bytes).
    write_json(out_dir / "metrics" / f"held_bytes_rank{rank}.json", {"rank": rank, "world_size": world, **held_bytes(engine)})
    dist.barrier()  # every rank's metrics file is complete before the summary says so
    if rank == 0:
        if checkpoints.export_fp32:
            export = ckpt.export_fp32(ckpt.step_dir(ckpt_root, steps), out_dir / "model_fp32")
            print(f"zerogate: consolidated fp32 model in {export}", file=sys.stderr)
        events.path.touch()
        write_json(
            out_dir / "summary.json",
            {
                "completed_steps": steps,
                "resumed_from_step": start_step if latest else None,
                "stabiliser": {"policy": stabiliser_cfg.policy, "skipped_steps": stabiliser.skipped_steps,
                               "rollbacks": stabiliser.rollbacks, "skipped_windows": skipped_windows},
                "world_size": world,
                "parameters": int(parameters),
                "wall_time(s)": time.perf_counter() - started,
                "metrics_time(s)": metrics.time_spent_s,
                "dtype": spec["dtype"],
                "accelerator": spec["accelerator"],
                "git": git_state(Path.cwd()),
            },
        )
    # Stop gloo's threads before interpreter teardown: with the group left alive a rank sometimes
    # aborted after finishing ("terminate called without an active exception", seen at ZeRO stage 0).
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
