"""What trains, behind one interface the one loop (zerogate.runtime.loop) drives: a DeepSpeed engine at
the rendered config's ZeRO stage, plain torch DDP (the baseline), or torch FSDP2 (a peer of ZeRO-3). Each
worker picks its engine; the loop, the metrics and the records are the same for all.

A micro-batch is one forward and one backward (``forward_backward``); between two micro-batches of one
window ``micro_step`` lets the engine do its bookkeeping; at the window's end ``boundary`` applies the
optimizer update, or drops it (``apply=False``) with every counter advanced, so the next window starts
clean.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import deepspeed
import deepspeed.accelerator
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from deepspeed.runtime.lr_schedules import WarmupCosineLR
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from zerogate.runtime import deepspeed_adapter as ds

CHECKPOINT_TAG = "ds"  # DeepSpeed's tag of a checkpoint in its directory


class TrainingEngine(Protocol):
    """What the one loop and the training run need of whatever trains."""

    name: str
    device: torch.device
    module: torch.nn.Module  # the model (what evaluation calls)

    def forward_backward(
        self, batch: dict[str, torch.Tensor], last: bool, adjust: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor: ...
    def micro_step(self) -> None: ...
    def boundary(self, apply: bool) -> None: ...
    def grad_norm(self) -> float | None: ...
    def update_applied(self) -> bool: ...
    def loss_scale(self) -> float | None: ...
    def skipped_steps(self) -> int | None: ...
    def lr(self) -> float: ...
    def fp16(self) -> bool: ...
    def parameter_count(self) -> int: ...
    def train(self) -> None: ...
    def eval(self) -> None: ...
    def save(self, directory: Path) -> None: ...
    def load(self, directory: Path) -> None: ...


class DeepSpeedEngine:
    """A DeepSpeed engine (any ZeRO stage, offloads as configured) as the loop sees it."""

    name = "deepspeed"

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any]) -> None:
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config
        )
        self.device = self.engine.device
        self.module = self.engine.module
        self.zero3 = (ds_config.get("zero_optimization") or {}).get("stage") == 3
        # Set by eval(): ZeRO-3's fetch trace then (ds.zero3_trace), for the next train() to compare.
        self._trace_before_eval: Any = None

    def __call__(self, **batch: Any) -> Any:
        """A forward through the engine (evaluation: under ZeRO-3 the engine gathers the parameters)."""
        return self.engine(**batch)

    def forward_backward(
        self,
        batch: dict[str, torch.Tensor],
        last: bool,
        adjust: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss,
    ) -> torch.Tensor:
        loss = adjust(self.engine(**batch).loss)
        self.engine.backward(loss)  # DeepSpeed scales by 1 / accumulation itself
        return loss.detach()

    def micro_step(self) -> None:
        self.engine.step()  # not the boundary: DeepSpeed only counts the micro-step

    def boundary(self, apply: bool) -> None:
        ds.boundary_step(self.engine, apply)

    def grad_norm(self) -> float | None:
        return ds.global_grad_norm(self.engine)

    def update_applied(self) -> bool:
        return ds.update_applied(self.engine)

    def loss_scale(self) -> float | None:
        return ds.loss_scale(self.engine)

    def skipped_steps(self) -> int | None:
        return ds.skipped_steps(self.engine)

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def fp16(self) -> bool:
        return ds.fp16(self.engine)

    def parameter_count(self) -> int:
        return ds.parameter_count(self.module)

    def train(self) -> None:
        """Training mode; under ZeRO-3 a fetch trace the evaluation's forward-only passes recorded or
        replaced is dropped, so the next micro-step records its own
        (zerogate.runtime.deepspeed_adapter.retrace_zero3)."""
        returning = not self.module.training  # eval() came before
        self.engine.train()
        if self.zero3 and returning:
            ds.retrace_zero3(self.engine, self._trace_before_eval)

    def eval(self) -> None:
        if self.zero3 and self.module.training:
            self._trace_before_eval = ds.zero3_trace(self.engine)
        self.engine.eval()

    def save(self, directory: Path) -> None:
        self.engine.save_checkpoint(str(directory), tag=CHECKPOINT_TAG, save_latest=False)

    def load(self, directory: Path) -> None:
        self.engine.load_checkpoint(str(directory), tag=CHECKPOINT_TAG)

    def destroy(self) -> None:
        """Free the engine: DeepSpeed 0.19.8 keeps a destroyed ZeRO-3 engine alive otherwise."""
        self.engine.destroy()
        ds.forget_zero3_engines()


def rank_device() -> torch.device:
    """The device this rank trains on, as deepspeed.initialize picks it for the DeepSpeed engine: the host on
    DeepSpeed's CPU accelerator, else the accelerator's device of the rank's LOCAL_RANK (made current)."""
    accelerator = deepspeed.accelerator.get_accelerator()
    if accelerator.device_name() == "cpu":
        return torch.device("cpu")
    accelerator.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device(accelerator.device_name(), accelerator.current_device())


class TorchOptimizerEngine:
    """What the torch-native engines share: the rendered config's optimizer, LR schedule and gradient
    clipping built with torch, the boundary (clip, step, schedule, zero) and the counters DeepSpeed keeps.
    DeepSpeed's own WarmupCosineLR is the schedule, so the rates match the DeepSpeed runs step for step."""

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any], accumulation: int) -> None:
        if (ds_config.get("fp16") or {}).get("enabled") is True:
            raise ValueError(f"the {self.name} engine trains in fp32 or bf16: it has no fp16 loss scaler")
        self.accumulation = accumulation
        optimizer = ds_config["optimizer"]
        params = optimizer["params"]
        kind = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer["type"].lower()]
        self.optimizer = kind(
            model.parameters(),
            lr=params["lr"],
            betas=tuple(params.get("betas", (0.9, 0.999))),
            weight_decay=params.get("weight_decay", 0.0),
        )
        schedule = (ds_config.get("scheduler") or {}).get("params")
        self.scheduler = WarmupCosineLR(self.optimizer, **schedule) if schedule else None
        self.clipping = float(ds_config.get("gradient_clipping", 0.0))
        self._norm: float | None = None
        self._applied = False
        self._skipped = 0

    def __call__(self, **batch: Any) -> Any:
        return self.module(**batch)

    def micro_step(self) -> None:
        pass

    def boundary(self, apply: bool) -> None:
        self._norm, self._applied = None, False
        if apply:
            limit = self.clipping if self.clipping > 0 else float("inf")
            # The global norm over every rank's gradients (for sharded gradients torch all-reduces it).
            self._norm = float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), limit))
            # A non-finite norm drops the update, as DeepSpeed's optimizers do.
            if self._norm == self._norm and self._norm != float("inf"):
                self.optimizer.step()
                if self.scheduler is not None:
                    self.scheduler.step()
                self._applied = True
        if not self._applied:
            self._skipped += 1
        self.optimizer.zero_grad(set_to_none=True)

    def grad_norm(self) -> float | None:
        return self._norm

    def update_applied(self) -> bool:
        return self._applied

    def loss_scale(self) -> float | None:
        return None

    def skipped_steps(self) -> int | None:
        return self._skipped

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def fp16(self) -> bool:
        return False

    def parameter_count(self) -> int:
        return ds.parameter_count(self.module)  # a DTensor's numel is the whole parameter's

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def destroy(self) -> None:
        pass


class DdpEngine(TorchOptimizerEngine):
    """Plain torch DDP with the rendered config's optimizer, schedule and clipping: the baseline. Gradients
    are all-reduced once per window (``no_sync`` before the last micro-batch), as DDP users accumulate."""

    name = "ddp"

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any], accumulation: int) -> None:
        self.device = rank_device()
        self.module = model.to(self.device)
        # On an accelerator each replica lives on its rank's own device (DDP's single-device form).
        device_ids = None if self.device.type == "cpu" else [self.device]
        self.ddp = DistributedDataParallel(self.module, device_ids=device_ids)
        super().__init__(model, ds_config, accumulation)

    def forward_backward(
        self,
        batch: dict[str, torch.Tensor],
        last: bool,
        adjust: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss,
    ) -> torch.Tensor:
        context = contextlib.nullcontext() if last else self.ddp.no_sync()
        with context:  # accumulate locally; all-reduce once, in the window's last micro-batch
            loss = adjust(self.ddp(**batch).loss)
            (loss / self.accumulation).backward()
        return loss.detach()

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            "optimizer": self.optimizer.state_dict(),
            "skipped": self._skipped,
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
        }
        if dist.get_rank() == 0:  # the replicas are identical
            state["model"] = self.module.state_dict()
            torch.save(state, directory / "ddp.pt")

    def load(self, directory: Path) -> None:
        state = torch.load(directory / "ddp.pt", weights_only=False)
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self._skipped = state["skipped"]


def fsdp2_offload(ds_config: dict[str, Any]) -> bool:
    """Whether the FSDP2 engine offloads (CPUOffloadPolicy): the config's parameter offload device, the
    ZeRO setting it stands for (CPUOffloadPolicy moves parameters, gradients and the optimizer step to the
    host together, as ZeRO-3 with both offloads does; zerogate.render.variants renders fsdp2-offload so)."""
    return ((ds_config.get("zero_optimization") or {}).get("offload_param") or {}).get("device") == "cpu"


def sharded_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks, each its own FSDP2 unit (gathered and freed on its own, as ZeRO-3 gathers
    per module): the classes transformers lists in ``_no_split_modules`` (the decoder layer)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [module for module in model.modules() if type(module).__name__ in names]


class Fsdp2Engine(TorchOptimizerEngine):
    """torch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state
    sharded over the ranks, as ZeRO-3 shards them; each decoder layer and the root a unit, resharded after
    its forward. Gradients are reduce-scattered after every micro-batch and accumulate sharded (as ZeRO-3
    reduces each micro-batch), not held whole until the window's end. The rendered config's optimizer,
    schedule and clipping; bf16 compute when the config asks for bf16 (fp32 reduction), fp32 otherwise.
    With the config's parameter offload on ``cpu`` (fsdp2_offload), CPUOffloadPolicy without pinned memory:
    pinning needs an accelerator, and on the CPU accelerator the parameters' device already is the host."""

    name = "fsdp2"
    zero3 = True  # every forward gathers parameters: evaluation's generate keeps the ranks in step

    def __init__(self, model: torch.nn.Module, ds_config: dict[str, Any], accumulation: int) -> None:
        self.offload = fsdp2_offload(ds_config)
        self.device = rank_device()
        options: dict[str, Any] = {}
        if (ds_config.get("bf16") or {}).get("enabled") is True:
            options["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32
            )
        if self.offload:
            options["offload_policy"] = CPUOffloadPolicy(pin_memory=self.device.type != "cpu")
        else:
            model = model.to(self.device)
        for block in sharded_blocks(model):
            fully_shard(block, **options)
        self.module = fully_shard(model, **options)
        super().__init__(self.module, ds_config, accumulation)

    def forward_backward(
        self,
        batch: dict[str, torch.Tensor],
        last: bool,
        adjust: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss,
    ) -> torch.Tensor:
        loss = adjust(self.module(**batch).loss)
        (loss / self.accumulation).backward()  # FSDP2 averages over the ranks in its reduce-scatter
        return loss.detach()

    def _state(self) -> dict[str, Any]:
        model, optimizer = get_state_dict(self.module, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        dcp.save(self._state(), checkpoint_id=str(directory / "fsdp2"))  # every rank writes its shards
        if dist.get_rank() == 0:
            torch.save(
                {
                    "skipped": self._skipped,
                    "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                },
                directory / "fsdp2_counters.pt",
            )

    def load(self, directory: Path) -> None:
        state = self._state()
        dcp.load(state, checkpoint_id=str(directory / "fsdp2"))
        set_state_dict(
            self.module, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        counters = torch.load(directory / "fsdp2_counters.pt", weights_only=False)
        if self.scheduler is not None and counters["scheduler"] is not None:
            self.scheduler.load_state_dict(counters["scheduler"])
        self._skipped = counters["skipped"]


ENGINES = ("deepspeed", "ddp", "fsdp2")


def build_engine(name: str, model_factory: Callable[[], torch.nn.Module], ds_config: dict[str, Any]) -> Any:
    """The engine ``name`` around the model ``model_factory`` builds (under ZeRO-3's Init where the engine
    partitions it: zerogate.model.build.load_for_training does that from the config it is given)."""
    if name == "deepspeed":
        return DeepSpeedEngine(model_factory(), ds_config)
    if name == "ddp":
        return DdpEngine(model_factory(), ds_config, int(ds_config["gradient_accumulation_steps"]))
    if name == "fsdp2":
        return Fsdp2Engine(model_factory(), ds_config, int(ds_config["gradient_accumulation_steps"]))
    raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
