"""The one training loop every launched worker runs: the training run (zerogate.train.loop, under DeepSpeed or
the DDP baseline), the communication-volume worker (zerogate.train.comms_volume), the compute measurement
(zerogate.predict.compute) and the runtime baseline (zerogate.runtime.baseline).

One optimizer step is one data window of ``accumulation`` micro-batches per rank: forward and backward of
each, the engine's bookkeeping between them, then the boundary. What differs between workers is passed in:
the engine (zerogate.runtime.engines), the step range, and :class:`LoopHooks`, which see every micro-batch
and decide the boundary (the training run's stabiliser, metrics and checkpoints live in its hooks, never
in this loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from zerogate.runtime.engines import DeepSpeedEngine
from zerogate.runtime.launch import one_rank_config


class RankBatches:
    """The micro-batches of one rank, in an order fixed by the seed alone.

    Global sample position p = ((step * accumulation + micro) * world + rank) * micro_batch + j walks
    through a fresh seeded permutation per epoch, so every rank sees distinct samples and a run can be
    replayed (or resumed) from the step number.
    """

    def __init__(self, split: Any, world: int, rank: int, micro_batch: int, accumulation: int, seed: int):
        self.split, self.world, self.rank = split, world, rank
        self.micro_batch, self.accumulation, self.seed = micro_batch, accumulation, seed
        self.rows = split.input_ids.shape[0]
        self._perms: dict[int, np.ndarray] = {}

    def _row(self, position: int) -> int:
        epoch, offset = divmod(position, self.rows)
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng(self.seed + epoch).permutation(self.rows)}
        return int(self._perms[epoch][offset])

    def get(self, window: int, micro: int) -> dict[str, torch.Tensor]:
        first = ((window * self.accumulation + micro) * self.world + self.rank) * self.micro_batch
        rows = [self._row(first + j) for j in range(self.micro_batch)]
        return {
            "input_ids": torch.from_numpy(self.split.input_ids[rows]),
            "attention_mask": torch.from_numpy(self.split.attention_mask[rows]),
            "labels": torch.from_numpy(self.split.labels[rows]),
        }


@dataclass
class Window:
    """One data window as trained: the summed micro-batch losses (on the device: no readback in the loop)
    and the tokens counted on the host copies (non-padding, and every position computed)."""

    step: int
    index: int  # the data window (a rollback skips windows, so it can differ from the step)
    loss_sum: torch.Tensor
    micro_batches: int = 0
    tokens: int = 0
    processed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_loss(self) -> torch.Tensor:
        return self.loss_sum / max(1, self.micro_batches)


class LoopHooks:
    """What a worker adds to the loop. The defaults train plainly: every window's data is its step's, every
    update is applied, the loop goes on to the next step."""

    def before_step(self, step: int) -> None:
        """Before the window's first micro-batch (0-based ``step``)."""

    def data_window(self, step: int) -> int:
        """The data window optimizer step ``step`` trains on."""
        return step

    def before_micro(self, step: int, micro: int) -> None:
        """Just before the micro-batch's forward (its batch is on the device)."""

    def adjust_loss(self, loss: torch.Tensor, window: int, micro: int) -> torch.Tensor:
        """The loss that is backpropagated (fault injection poisons it here)."""
        return loss

    def after_micro(self, step: int, micro: int) -> None:
        """Just after the micro-batch's backward, before the engine's bookkeeping."""

    def at_boundary(self, engine: Any, window: Window) -> int:
        """The window's end: apply (or drop) the update and return the next step to train (a rollback
        returns an earlier one)."""
        engine.boundary(apply=True)
        return window.step + 1


def run(
    engine: Any,
    batches: RankBatches,
    accumulation: int,
    start_step: int,
    steps: int,
    hooks: LoopHooks | None = None,
) -> int:
    """Train optimizer steps ``start_step`` .. ``steps - 1`` (0-based); the step reached."""
    hooks = hooks or LoopHooks()
    step = start_step
    while step < steps:
        hooks.before_step(step)
        window = Window(step, hooks.data_window(step), torch.zeros((), device=engine.device))
        for micro in range(accumulation):
            host_batch = batches.get(window.index, micro)
            batch = {name: tensor.to(engine.device) for name, tensor in host_batch.items()}
            hooks.before_micro(step, micro)
            window.loss_sum += engine.forward_backward(
                batch, micro == accumulation - 1, lambda loss: hooks.adjust_loss(loss, window.index, micro)
            )
            hooks.after_micro(step, micro)
            # Counted on the host copy: no device work or readback between micro-batches.
            window.micro_batches += 1
            window.tokens += int(host_batch["attention_mask"].sum())
            window.processed += host_batch["input_ids"].numel()
            if micro < accumulation - 1:
                engine.micro_step()
        step = hooks.at_boundary(engine, window)
    return step


class _TinySplit:
    """A few rows of a tiny vocabulary: data for an engine that must run, not learn."""

    def __init__(self, rows: int = 4, length: int = 8, vocab: int = 16) -> None:
        ids = np.arange(rows * length, dtype=np.int64).reshape(rows, length) % vocab
        self.input_ids, self.labels = ids, ids.copy()
        self.attention_mask = np.ones_like(ids)


def one_step_on_a_tiny_model(ds_config: dict[str, Any]) -> None:
    """One optimizer step of a one-layer causal LM of a few hundred parameters through the rendered config's
    DeepSpeed engine in the current one-rank world: what a rank loads to train (the engine, the optimizer's
    op, autograd), nothing that scales with the run's model (the runtime baseline,
    zerogate.runtime.baseline)."""
    # Here, not at the top: the runtime baseline counts the tiny model's transformers classes in its engine
    # stage, not in what importing the training module loads.
    from transformers import LlamaConfig, LlamaForCausalLM

    config = one_rank_config(ds_config)
    config.get("zero_optimization", {}).pop("leaf_module", None)
    tiny = LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    tiny._attn_implementation = "eager"
    engine = DeepSpeedEngine(LlamaForCausalLM(tiny), config)
    engine.train()
    accumulation = int(config["gradient_accumulation_steps"])
    run(engine, RankBatches(_TinySplit(), 1, 0, 1, accumulation, 0), accumulation, 0, 1)
