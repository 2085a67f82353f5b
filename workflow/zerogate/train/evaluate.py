"""Evaluation during training: validation loss before training, every N optimizer steps and at the end;
for the built-in dataset also exact match of greedy answers on held-out items (before and after only).

Under ZeRO-3 every forward is collective (each rank gathers the parameters it lacks), so each rank
evaluates the same number of batches (its share of the rows) and generation runs with
``synced_gpus=True``, transformers' mode that keeps ranks stepping together until all have finished.

Rank 0 appends one JSON object per evaluation to ``<out_dir>/eval.jsonl``:

    {"step": 0, "phase": "before" | "during" | "after",
     "validation/loss": 2.31,            # mean cross-entropy per learned (unmasked) token, all ranks
     "validation/tokens": 5120,          # learned tokens it was averaged over
     "validation/rows": 64,
     "exact_match/accuracy": 0.15,       # built-in dataset only (else absent): greedy answer == reference
     "exact_match/correct": 3, "exact_match/items": 20,
     "exact_match/by_task": {"reverse": [1, 4], ...},   # [correct, items] per task
     "eval_time(s)": 12.3}
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from zerogate.config.training import EvaluationSettings
from zerogate.contracts.base import line_of
from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.records import EvalRecord
from zerogate.data.dataset import EncodedSplit, load_split
from zerogate.data.templates import IGNORE_INDEX


def settings_for(manifest: DatasetManifest, evaluation: EvaluationSettings, steps: int) -> EvaluationSettings:
    """The evaluation settings (zerogate.config.training.EvaluationSettings, from train/settings.json)
    resolved
    for a run of ``steps``: ``every_steps`` 0 becomes four times per run; a user dataset has no reference
    answers, so no exact match."""
    return evaluation.model_copy(
        update={
            "every_steps": evaluation.interval(steps),
            "exact_match_items": evaluation.exact_match_items if manifest.builtin else 0,
        }
    )


def rank_share(count: int, world: int, rank: int) -> range:
    """Rank ``rank``'s rows of the first ``count``: the same number on every rank (collective forwards)."""
    per_rank = count // world
    return range(rank * per_rank, (rank + 1) * per_rank)


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor.tolist()


@torch.no_grad()
def validation_loss(
    model: Any, split: EncodedSplit, rows: int, world: int, rank: int, device: torch.device
) -> dict[str, float]:
    """Mean loss per learned token over the first ``rows`` rows (fewer if the split is smaller)."""
    loss_sum = tokens = 0.0
    share = rank_share(min(rows, split.input_ids.shape[0]), world, rank)
    for row in share:
        batch = {
            name: torch.from_numpy(getattr(split, name)[row : row + 1]).long().to(device)
            for name in ("input_ids", "attention_mask", "labels")
        }
        learned = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())  # the loss shifts labels by one
        if learned:
            loss_sum += float(model(**batch).loss) * learned
            tokens += learned
        else:
            model(**batch)  # keep the collective forwards in step with the other ranks
    loss_sum, tokens, count = _all_sum([loss_sum, tokens, len(share)], device)
    return {
        "validation/loss": loss_sum / tokens if tokens else float("nan"),
        "validation/tokens": int(tokens),
        "validation/rows": int(count),
    }


def normalise(text: str) -> str:
    return " ".join(text.split())


@torch.no_grad()
def exact_match(
    model: Any,
    tokenizer: Any,
    items: list[dict[str, Any]],
    world: int,
    rank: int,
    device: torch.device,
    max_new_tokens: int,
    synced: bool,
) -> dict[str, Any]:
    """Greedy-decode each held-out prompt; correct when the answer equals the reference
    (whitespace-normalised)."""
    by_task: dict[str, list[int]] = {}
    for index in rank_share(len(items), world, rank):
        item = items[index]
        prompt = torch.tensor([item["prompt_ids"]], device=device)
        output = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            synced_gpus=synced,
        )
        answer = tokenizer.decode(output[0, prompt.shape[1] :], skip_special_tokens=True)
        counts = by_task.setdefault(item.get("task", "all"), [0, 0])
        counts[0] += int(normalise(answer) == normalise(item["answer"]))
        counts[1] += 1
    tasks = sorted({*by_task, *_gather_task_names(by_task)})
    flat = _all_sum([float(by_task.get(t, [0, 0])[i]) for t in tasks for i in (0, 1)], device)
    merged = {t: [int(flat[2 * k]), int(flat[2 * k + 1])] for k, t in enumerate(tasks)}
    correct, total = sum(c for c, _ in merged.values()), sum(n for _, n in merged.values())
    return {
        "exact_match/accuracy": correct / total if total else float("nan"),
        "exact_match/correct": correct,
        "exact_match/items": total,
        "exact_match/by_task": merged,
    }


def _gather_task_names(by_task: dict[str, list[int]]) -> set[str]:
    if not dist.is_initialized():
        return set(by_task)
    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, sorted(by_task))
    return {name for rank_names in names for name in rank_names}


class Evaluator:
    """Runs the evaluations of one training run and writes eval.jsonl (rank 0)."""

    def __init__(
        self,
        engine: Any,
        dataset_dir: str | Path,
        path: str | Path,
        manifest: DatasetManifest,
        evaluation: EvaluationSettings,
        steps: int,
    ) -> None:
        # Here, not at the top: the runtime baseline (zerogate.runtime.baseline) measures what importing the
        # training module loads, and a rank loads transformers' tokenizers only once it evaluates.
        from transformers import AutoTokenizer

        # Under ZeRO-3 generation keeps the ranks stepping together (every forward gathers parameters).
        self.engine, self.zero3 = engine, bool(getattr(engine, "zero3", False))
        self.settings = settings_for(manifest, evaluation, steps)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.split = load_split(Path(dataset_dir) / "validation.parquet")
        lines = (Path(dataset_dir) / "validation_examples.jsonl").read_text().splitlines()
        self.items = [json.loads(line) for line in lines[: self.settings.exact_match_items]]
        self.tokenizer = AutoTokenizer.from_pretrained(manifest.tokenizer_directory) if self.items else None
        # Appended to, never truncated here: the training loop removes it for a fresh run and restores it
        # with each checkpoint, which holds the evaluations of the steps before it, so after a resume or a
        # rollback every evaluation is recorded exactly once.
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def run(self, step: int, phase: str) -> EvalRecord:
        started = time.perf_counter()
        was_training = self.engine.module.training
        self.engine.eval()
        found: dict[str, Any] = {"step": step, "phase": phase}
        found.update(
            validation_loss(
                self.engine,
                self.split,
                self.settings.validation_rows,
                self.world,
                self.rank,
                self.engine.device,
            )
        )
        if self.items and phase != "during":  # greedy decoding is slow under ZeRO-3: before/after only
            found.update(
                exact_match(
                    self.engine.module,
                    self.tokenizer,
                    self.items,
                    self.world,
                    self.rank,
                    self.engine.device,
                    self.settings.max_new_tokens,
                    self.zero3,
                )
            )
        found["eval_time(s)"] = time.perf_counter() - started
        record = EvalRecord.of(found, "the evaluation")
        if was_training:
            self.engine.train()
        if self.rank == 0:
            with self.path.open("a") as handle:
                handle.write(line_of(record) + "\n")
        return record

    def maybe_run(self, step: int) -> EvalRecord | None:
        """Before the first step, and after every ``every_steps`` completed steps (not the last: see end)."""
        if step == 0:
            return self.run(0, "before")
        if step % self.settings.every_steps == 0:
            return self.run(step, "during")
        return None
