"""The training run: a causal LM fine-tuned under the rendered config, by DeepSpeed (default) or torch DDP.

Launched by DeepSpeed's launcher, one process per rank (the ``train`` rule does this via
``python -m zerogate.runtime.launch``, which picks the rank count and environment from run_spec.json):

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 deepspeed --num_gpus 2 --module zerogate.train.loop \\
        --run-spec results/cpu-tiny/<machine>/deepspeed/run_spec.json \\
        --ds-config results/cpu-tiny/<machine>/deepspeed/ds_config.json \\
        --settings results/cpu-tiny/<machine>/train/settings.json \\
        --dataset-dir results/cpu-tiny/<machine>/dataset --out-dir results/cpu-tiny/<machine>/train \\
        --checkpoint-dir results/cpu-tiny/<machine>/checkpoints [--engine ddp]

Rerun after an interruption, it resumes from the newest complete checkpoint of the same configuration.
The optimizer steps are the one loop's (zerogate.runtime.loop); this module sets the run up, says what
happens at each step's boundary (:class:`RunHooks`) and finishes it. Who does what: metrics
(zerogate.train.metrics), the per-step policy -- stabiliser verdicts, skip, rollback, abort, fault
injection (zerogate.train.policy, zerogate.train.stabiliser) --, checkpoints (zerogate.train.checkpoint),
the checkpoint and evaluation cadences (zerogate.config.training), evaluation (zerogate.train.evaluate),
the engines (zerogate.runtime.engines).
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator
from tqdm import tqdm
from transformers import set_seed

from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.machine import Fingerprint, NodeFingerprint
from zerogate.contracts.records import GitState, HeldBytes, LiveTensorPeak, StabiliserSummary, TrainSummary
from zerogate.contracts.run import DsConfig, RunSpec, TrainSettings
from zerogate.data.dataset import load_split
from zerogate.hardware import peak_flops, product_parameters, training_flops_per_token
from zerogate.hashing import sha256_json
from zerogate.model.build import load_for_training
from zerogate.model.counts import input_embedding
from zerogate.provenance import git_state
from zerogate.runtime import loop
from zerogate.runtime.collective_clock import CollectiveClock
from zerogate.runtime.engines import ENGINES, build_engine
from zerogate.runtime.heap import release_freed_memory
from zerogate.runtime.nodes import rank_env_from_slurm
from zerogate.runtime.ops import keep_cpu_info
from zerogate.runtime.probe import probe
from zerogate.runtime.process_exit import exit_without_teardown
from zerogate.train import checkpoint as ckpt
from zerogate.train.evaluate import Evaluator
from zerogate.train.held import held_bytes
from zerogate.train.live_peak import sample_step
from zerogate.train.metrics import MeasurementSources, ModelFlops, NoMetrics, StepMetrics
from zerogate.train.nvml_sampler import NvmlSampler, nvml_query
from zerogate.train.policy import FaultInjector, StepPolicy, skip_reason
from zerogate.train.stabiliser import EventLog, Stabiliser, data_window


def rank_arguments(description: str | None, out_dir_help: str) -> argparse.ArgumentParser:
    """The arguments every module the launcher starts on each rank takes (zerogate.runtime.launch passes
    them)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-spec", required=True, help="run_spec.json from render_deepspeed_config")
    parser.add_argument("--dataset-dir", required=True, help="directory written by prepare_dataset")
    parser.add_argument("--out-dir", required=True, help=out_dir_help)
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = rank_arguments(__doc__, "where metrics/rank<N>.jsonl, events.jsonl, summary.json go")
    parser.add_argument("--ds-config", required=True, help="ds_config.json from render_deepspeed_config")
    parser.add_argument(
        "--settings", required=True, help="train/settings.json: stabiliser, checkpoints, evaluation"
    )
    parser.add_argument("--checkpoint-dir", required=True, help="checkpoints; outside the rule's outputs")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="deepspeed",
        help="what trains (ddp: the baseline; fsdp2: torch FSDP2)",
    )
    parser.add_argument(
        "--no-metrics", action="store_true", help="metrics layer off (zerogate.bench.metrics_overhead)"
    )
    return parser.parse_args(argv)


def start_distributed(spec: RunSpec) -> tuple[int, int]:
    """This rank's process group (its rank and the world size), as the launcher and the run spec set it."""
    # Ranks that DeepSpeed's slurm backend started with srun learn their rank from srun's variables. Over
    # several nodes a bounded collective timeout makes a dead node end the run instead of hanging it.
    os.environ.update(rank_env_from_slurm(os.environ))
    timeout = spec.nodes.collective_timeout_s if spec.nodes else None
    keep_cpu_info()  # DeepSpeed asks py-cpuinfo again at every op it loads
    deepspeed.init_distributed(
        dist_backend=spec.backend, **({"timeout": datetime.timedelta(seconds=timeout)} if timeout else {})
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != spec.world_size:
        raise SystemExit(f"zerogate: launched {world} ranks but run_spec.json asks for {spec.world_size}")
    return rank, world


def rank_placement(spec: RunSpec, rank: int) -> dict[str, Any] | None:
    """Where this rank runs on a run of several nodes (node, local rank, host); None on one node."""
    nodes = spec.nodes
    if not nodes:
        return None
    return {
        "node": rank // nodes.ranks_per_node,
        "local_rank": int(os.environ.get("LOCAL_RANK", rank)),
        "host": socket.gethostname(),
    }


class Run:
    """One rank's training run: its settings, engine, data, records and checkpoints."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._read_inputs(args)
        # Counts each rank's time blocked in collectives (metrics); installed before DeepSpeed keeps
        # references.
        self.collectives = None if args.no_metrics else CollectiveClock().install()
        self.rank, self.world = start_distributed(self.spec)
        self.placement = rank_placement(self.spec, self.rank)
        self._open_records(args)
        inject = self.settings.stabiliser.inject
        if (inject or {}).get("rank", 0) >= self.world:  # an injection no rank would see tests nothing
            raise SystemExit(
                f"zerogate: error: {args.settings}: stabiliser.inject.rank: {inject['rank']} is not a "
                f"rank of this run's {self.world}"
            )
        set_seed(self.spec.training.seed)  # same seed on every rank: zero.Init must build identical weights
        self.engine = self._build_engine(args.engine)
        # Loading built the model whole before DeepSpeed partitioned it; glibc keeps those freed pages
        # resident unless trimmed, and the measured peak would count garbage (zerogate.runtime.heap).
        release_freed_memory()
        self.batches = loop.RankBatches(
            load_split(self.dataset_dir / "train.parquet"),
            self.world,
            self.rank,
            self.spec.training.micro_batch_per_rank,
            self.accumulation,
            self.spec.training.seed,
        )
        self.events = EventLog(self.out_dir / "events.jsonl")
        self.eval_file = self.out_dir / "eval.jsonl"
        # Rank 0's run-level logs travel with each checkpoint, so a resumed run continues them.
        self.run_logs = [self.events.path, self.eval_file] if self.rank == 0 else []
        self.stabiliser = Stabiliser(self.settings.stabiliser)
        self.policy = StepPolicy(
            self.stabiliser, self.events, self.rank, self.engine.fp16(), barrier=dist.barrier
        )
        self.faults = FaultInjector(inject, self.rank)
        self.skipped_windows: list[int] = []  # data windows a rollback took out of the run
        self.no_metrics = args.no_metrics
        self.started = time.perf_counter()

    def _read_inputs(self, args: argparse.Namespace) -> None:
        """The run spec, DeepSpeed config, settings and dataset manifest, and the run's fingerprint."""
        self.spec = RunSpec.read(args.run_spec)
        self.ds_config = DsConfig.read(args.ds_config).raw
        self.settings = TrainSettings.read(args.settings)
        self.dataset_dir = Path(args.dataset_dir)
        self.manifest = DatasetManifest.read(self.dataset_dir / "manifest.json")
        if self.manifest.seq_len != self.spec.seq_len:
            raise SystemExit(
                f"zerogate: error: {self.dataset_dir / 'manifest.json'}: seq_len: the dataset was built "
                f"at {self.manifest.seq_len} tokens, the run spec asks for {self.spec.seq_len}"
            )
        self.steps = self.spec.training.optimizer_steps
        self.accumulation = int(self.ds_config["gradient_accumulation_steps"])
        # A checkpoint resumes only the run it came from: same DeepSpeed config, spec, data, stabiliser,
        # engine.
        self.fingerprint = sha256_json(
            {
                "ds_config": self.ds_config,
                "run_spec": self.spec.as_json(),
                "stabiliser": self.settings.stabiliser.model_dump(),
                "dataset": self.manifest.content_sha256,
                "engine": args.engine,
            }
        )

    def _open_records(self, args: argparse.Namespace) -> None:
        """Where this rank writes (its metrics file's directory made), and on several nodes each node's
        fingerprint beside the records (written by its local rank 0)."""
        self.out_dir, self.checkpoint_root = Path(args.out_dir), Path(args.checkpoint_dir)
        self.metrics_file = self.out_dir / "metrics" / f"rank{self.rank}.jsonl"
        self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
        if self.placement and self.placement["local_rank"] == 0:
            NodeFingerprint(
                node=self.placement["node"], machine=Fingerprint.of(probe(measure=False), "the probe")
            ).write(self.metrics_file.parent / f"node{self.placement['node']}.json")

    def _build_engine(self, engine: str) -> Any:
        """The engine around any model source (shape numbers, HF directory, GGUF, hub cache), built or
        loaded under ZeRO-3's Init where the engine partitions it; the DDP baseline's and FSDP2's model is
        built whole on every rank (FSDP2 shards it after)."""
        built_for = (
            self.ds_config if engine == "deepspeed" else {**self.ds_config, "zero_optimization": {"stage": 0}}
        )
        return build_engine(
            engine, lambda: load_for_training(self.spec, self.manifest, built_for), self.ds_config
        )

    # --- checkpoints ---------------------------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> None:
        staging = ckpt.staging_dir(self.checkpoint_root, step)
        self.engine.save(staging)
        ckpt.write_rank_files(
            staging,
            self.rank,
            {"skipped_windows": self.skipped_windows, "stabiliser": self.stabiliser.state()},
            self.metrics_file,
            self.run_logs,
        )
        dist.barrier()  # every rank's partitions are on disk before the checkpoint is called complete
        if self.rank == 0:
            ckpt.publish(self.checkpoint_root, step, self.fingerprint, self.settings.checkpoint.keep)
        dist.barrier()

    def restore(self, found: tuple[int, Path], with_events: bool) -> int:
        step, path = found
        self.engine.load(path)
        # A rollback keeps the events that explain it; a resume puts them back as they were.
        logs = self.run_logs if with_events else [f for f in self.run_logs if f != self.events.path]
        state = ckpt.restore_rank_files(path, self.rank, self.metrics_file, logs)
        self.skipped_windows = list(state["skipped_windows"])
        rollbacks = self.stabiliser.rollbacks
        self.stabiliser.load_state(state["stabiliser"])
        self.stabiliser.rollbacks = max(rollbacks, self.stabiliser.rollbacks)
        return step

    def resume(self) -> int | None:
        """The step a resumed run starts from (None for a fresh run, whose old logs are removed)."""
        if self.rank == 0:
            for stale in ckpt.clear_stale(self.checkpoint_root, self.fingerprint):
                print(f"zerogate: removed stale checkpoint {stale}", file=sys.stderr)
        dist.barrier()
        latest = ckpt.latest_checkpoint(self.checkpoint_root, self.fingerprint)
        if latest is None:
            if self.rank == 0:
                self.events.path.unlink(missing_ok=True)
                self.eval_file.unlink(missing_ok=True)
            return None
        step = self.restore(latest, with_events=True)
        print(f"zerogate: rank {self.rank} resumed from {latest[1]} at step {step}", file=sys.stderr)
        return step

    # --- metrics and evaluation
    # ------------------------------------------------------------------------------

    def start_metrics(self, resumed: bool) -> Any:
        cuda = self.spec.accelerator == "cuda"
        device_name = torch.cuda.get_device_name(self.engine.device) if cuda else None
        query = nvml_query(self.engine.device.index or 0) if cuda else None
        config = self.engine.module.config
        return (NoMetrics if self.no_metrics else StepMetrics)(
            self.metrics_file,
            self.rank,
            self.engine.device,
            append=resumed,
            placement=self.placement,
            flops=ModelFlops(
                per_token=training_flops_per_token(
                    product_parameters(self.engine.parameter_count(), *input_embedding(config)),
                    config.num_hidden_layers,
                    config.hidden_size,
                    self.spec.seq_len,
                ),
                peak_per_s=peak_flops(device_name, self.spec.dtype),
            ),
            sources=MeasurementSources(
                nvml=NvmlSampler(query).start() if query else None, collectives=self.collectives
            ),
        )

    def finish(self, metrics: Any, evaluator: Evaluator, resumed_from: int | None) -> None:
        evaluator.run(self.steps, "after")  # validation loss (and exact match) after the last step
        metrics.close()
        # What this rank holds, for the ledger-vs-measured check (zerogate.train.held.held_bytes).
        HeldBytes.of(
            {
                "rank": self.rank,
                "world_size": self.world,
                **held_bytes(getattr(self.engine, "engine", self.engine)),
            },
            "the held bytes",
        ).write(self.out_dir / "metrics" / f"held_bytes_rank{self.rank}.json")
        if self.spec.accelerator == "cpu":
            # The live-tensor peak of one more optimizer step, outside the timed ones (on GPUs the allocator's
            # peak, recorded every step, is the tensor peak): the ledger's tensor peak, measured.
            LiveTensorPeak.of(
                sample_step(self.engine, self.batches, self.accumulation, self.steps, self.rank),
                "the live-tensor peak",
            ).write(self.out_dir / "metrics" / f"live_tensors_rank{self.rank}.json")
        dist.barrier()  # every rank's metrics file is complete before the summary says so
        if self.rank == 0:
            if self.settings.checkpoint.export_fp32:
                export = ckpt.export_fp32(
                    ckpt.step_dir(self.checkpoint_root, self.steps), self.out_dir / "model_fp32"
                )
                print(f"zerogate: consolidated fp32 model in {export}", file=sys.stderr)
            self.events.path.touch()
            TrainSummary(
                completed_steps=self.steps,
                resumed_from_step=resumed_from,
                stabiliser=StabiliserSummary(
                    policy=self.settings.stabiliser.policy,
                    skipped_steps=self.stabiliser.skipped_steps,
                    rollbacks=self.stabiliser.rollbacks,
                    skipped_windows=self.skipped_windows,
                ),
                world_size=self.world,
                parameters=self.engine.parameter_count(),
                wall_time_s=time.perf_counter() - self.started,
                metrics_time_s=metrics.time_spent_s,
                dtype=self.spec.dtype,
                accelerator=self.spec.accelerator,
                git=GitState(**git_state(Path.cwd())),
                engine=self.engine.name,
            ).write(self.out_dir / "summary.json")
        # Stop gloo's threads before interpreter teardown: with the group left alive a rank sometimes
        # aborted after finishing ("terminate called without an active exception", seen at ZeRO stage 0).
        dist.destroy_process_group()


class RunHooks(loop.LoopHooks):
    """What the training run does around the one loop's micro-batches and at each boundary."""

    def __init__(self, run: Run, metrics: Any, evaluator: Evaluator, progress: tqdm) -> None:
        self.run, self.metrics, self.evaluator, self.progress = run, metrics, evaluator, progress
        self.lr = 0.0

    def before_step(self, step: int) -> None:
        if self.evaluator.maybe_run(step):  # validation before step 1 and every N steps, kept out of the
            self.metrics.reset_window()  # next step's time and memory peak
        get_accelerator().synchronize()  # the step's clock starts with the device idle
        self.metrics.start_step()
        self.lr = (
            self.run.engine.lr()
        )  # the rate this step's update uses (the scheduler moves at the boundary)

    def data_window(self, step: int) -> int:
        return data_window(step, self.run.skipped_windows)

    def before_micro(self, step: int, micro: int) -> None:
        self.run.faults.slow_down(step)  # the `slow` injection: a straggler rank (tests; off by default)

    def adjust_loss(self, loss: torch.Tensor, window: int, micro: int) -> torch.Tensor:
        return self.run.faults.poison(loss, window, micro)

    def after_micro(self, step: int, micro: int) -> None:
        if micro < self.run.accumulation - 1:
            self.metrics.micro_step_done()

    def at_boundary(self, engine: Any, window: loop.Window) -> int:
        run, step = self.run, window.step
        # One collective per optimizer step, before the update: each rank's window loss in its own slot, so
        # every rank learns every rank's loss (a non-finite one stays in its slot). The .tolist() is the
        # step's one host sync, so the step time includes all device work.
        rank_losses = torch.zeros(run.world, device=engine.device, dtype=torch.float64)
        rank_losses[run.rank] = window.mean_loss
        dist.all_reduce(rank_losses)
        losses = rank_losses.tolist()
        verdict = run.policy.before_update(losses)
        engine.boundary(apply=verdict.ok)  # a bad window's update is dropped, counters advance
        self.metrics.micro_step_done()
        mean_loss = sum(losses) / run.world
        grad_norm = engine.grad_norm() if verdict.ok else None
        verdict = run.policy.after_update(verdict, grad_norm, run.world)
        applied = verdict.ok and engine.update_applied()
        if run.policy.settle(step + 1, verdict) == run.policy.CONTINUE:  # applied, or skipped by the policy
            if applied:
                run.stabiliser.accept(mean_loss)  # only applied steps make the spike detector's history
            self.metrics.end_step(
                step + 1,
                mean_loss,
                grad_norm,
                self.lr,
                window.tokens,
                run.accumulation,
                processed_tokens=window.processed,
                extra={
                    "data_window": window.index,
                    "update_applied": applied,
                    "skip_reason": skip_reason(verdict, applied),
                    "loss_scale": engine.loss_scale(),
                    "skipped_steps_deepspeed": engine.skipped_steps(),
                },
            )
            self.progress.set_postfix(loss=f"{mean_loss:.3f}", refresh=False)
            self.progress.update(1)
            if run.settings.checkpoint.due(step + 1, run.steps):
                run.save_checkpoint(step + 1)
            return step + 1
        # Rollback: back to the newest good checkpoint; the offending data window is never trained on.
        found = ckpt.latest_checkpoint(run.checkpoint_root, run.fingerprint)
        if found is None:
            run.policy.no_checkpoint(step + 1, verdict)
        run.stabiliser.rollbacks += 1
        back = run.restore(found, with_events=False)
        run.skipped_windows = sorted({*run.skipped_windows, window.index})
        self.metrics.reopen()  # the metrics file was put back as it was at the checkpoint
        self.progress.n = back
        print(
            f"zerogate: rank {run.rank} rolled back to step {back}; data window {window.index} skipped",
            file=sys.stderr,
        )
        return back


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(args)
    resumed_from = run.resume()
    metrics = run.start_metrics(resumed=resumed_from is not None)
    evaluator = Evaluator(
        run.engine, run.dataset_dir, run.eval_file, run.manifest, run.settings.evaluation, run.steps
    )
    if resumed_from is None and run.settings.stabiliser.policy == "rollback":
        run.save_checkpoint(0)  # rollback needs a good state to return to, even before the first interval
    start = resumed_from or 0
    progress = tqdm(
        total=run.steps,
        initial=start,
        desc="train",
        unit="step",
        disable=run.rank != 0,
        mininterval=5,
        ncols=100,
        file=sys.stderr,
    )
    run.engine.train()
    loop.run(
        run.engine,
        run.batches,
        run.accumulation,
        start,
        run.steps,
        RunHooks(run, metrics, evaluator, progress),
    )
    progress.close()
    run.finish(metrics, evaluator, resumed_from)
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())
