"""The profile's sections the training loop acts on: ``training`` (the optimisation), ``stabiliser`` (and
its fault injection), ``checkpoint`` and ``evaluation``, with the check that ties the stabiliser and the
checkpoints together (:func:`check_checkpoint_needs`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from zerogate.config.base import (
    AsWritten,
    Bool,
    Int,
    Number,
    OptionalNumber,
    Problem,
    Settings,
    Where,
    anywhere,
    in_file,
    raise_problem,
    setting,
)
from zerogate.config.validation import build


class OptimizerSpec(Settings):
    """``training.optimizer``: the optimizer DeepSpeed builds."""

    type: Literal["AdamW", "Adam"] = setting("the optimizer")
    lr: Number = setting("peak learning rate", gt=0)
    weight_decay: OptionalNumber = setting("decoupled weight decay (AdamW) or L2 penalty (Adam)", None, ge=0)
    betas: Annotated[list[Annotated[Number, Field(ge=0, lt=1)]], Field(min_length=2, max_length=2)] | None = (
        setting("the moment estimates' decay rates [beta1, beta2]", None)
    )


class RunTraining(Settings):
    """The profile's ``training`` section as the run sees it: the optimisation it performs. The
    analysis-only key (``warmup_steps_excluded``) is not part of it, so editing that re-judges the run and
    never retrains it or discards its checkpoints."""

    optimizer_steps: Int = setting("optimizer steps to train", ge=1)
    micro_batch_per_rank: Int = setting("rows per micro-step per rank", ge=1)
    gradient_accumulation_steps: Int = setting("micro-steps per optimizer step", ge=1)
    cpu_ranks: Int = setting("ranks on a machine without GPUs", ge=1)
    seed: Int = setting("seed of weights and data order")
    optimizer: Annotated[dict[str, Any], AsWritten(OptimizerSpec)] = setting(
        "{type: AdamW | Adam, lr, weight_decay, betas}"
    )
    lr_warmup_steps: Int = setting(
        "linear learning-rate warm-up steps of the cosine schedule, at least 1 "
        "(DeepSpeed's WarmupCosineLR refuses 0 and warms up over at least 2)",
        ge=1,
    )
    gradient_clipping: Number = setting("global gradient-norm clip (0 = off)", ge=0)
    train_batch_size: Int | None = setting(
        "optional; must equal micro_batch_per_rank x accumulation x ranks", None, ge=1
    )
    activation_checkpointing: Bool = setting(
        "recompute each decoder layer's activations in the backward (transformers' gradient checkpointing, "
        "non-reentrant) instead of keeping them: less activation memory, one more forward per micro-step",
        False,
    )
    loss_in_fp32: Bool = setting(
        "compute the cross-entropy on the logits upcast to fp32 (transformers' ForCausalLMLoss); false: on "
        "the logits in the training dtype, as a hand-written nn.CrossEntropyLoss on the model's output does "
        "(no fp32 copy of the logits: less memory at fp16/bf16, the same at fp32)",
        True,
    )


class TrainingSettings(RunTraining):
    """``training``: the optimisation the run performs, and which of its steps the timing statistics leave
    out."""

    warmup_steps_excluded: Int = setting(
        "analysis only: first steps left out of the timing statistics (never retrains)", ge=0
    )

    @property
    def run(self) -> RunTraining:
        """What the run sees (without the analysis-only keys), its values as validated here."""
        return RunTraining.model_construct(**{name: getattr(self, name) for name in RunTraining.model_fields})


STEP = "is not an integer >= 1"
RANK = "is not an integer >= 0"


class NanLossInjection(Settings):
    """A NaN loss on one data window of one rank."""

    kind: Literal["nan_loss"] = setting("a non-finite loss")
    step: Int = setting("the optimizer step (data window) whose loss is poisoned", ge=1, refused=STEP)
    rank: Int = setting("the rank the fault hits", 0, ge=0, refused=RANK)


class LossSpikeInjection(Settings):
    """A loss spike on one data window of one rank."""

    kind: Literal["loss_spike"] = setting("a finite loss far above the recent ones")
    step: Int = setting("the optimizer step (data window) whose loss is poisoned", ge=1, refused=STEP)
    rank: Int = setting("the rank the fault hits", 0, ge=0, refused=RANK)


class SlowInjection(Settings):
    """A straggler: one rank sleeps in every micro-step from optimizer step ``step`` on."""

    kind: Literal["slow"] = setting("a straggler")
    seconds: Number = setting(
        "extra seconds slept in every micro-step",
        gt=0,
        allow_inf_nan=False,
        refused="is not a number of seconds > 0 (the extra time per micro-step)",
    )
    rank: Int = setting("the rank the fault hits", 0, ge=0, refused=RANK)
    step: Int = setting("the first delayed optimizer step", 1, ge=1, refused=STEP)


Injection = Annotated[NanLossInjection | LossSpikeInjection | SlowInjection, Field(discriminator="kind")]
INJECTIONS: dict[str, type[Settings]] = {
    "nan_loss": NanLossInjection,
    "loss_spike": LossSpikeInjection,
    "slow": SlowInjection,
}


class StabiliserSettings(Settings):
    """``stabiliser``: what happens when a step's loss or gradient norm is non-finite or spikes."""

    policy: Literal["abort", "skip", "rollback"] = setting(
        "abort: stop the run; skip: drop the update and the batch; rollback: restore the newest checkpoint "
        "and skip the offending data window (needs checkpoint.every_steps > 0)",
        "skip",
    )
    spike_window: Int = setting("optimizer steps of loss history for the rolling robust z-score", 128, ge=4)
    spike_threshold: Number = setting(
        "a loss whose robust z-score exceeds this is a spike (upward only: a sudden drop is not one)",
        6.0,
        gt=0,
    )
    spike_min_history: Int = setting("steps of history before spikes are judged", 20, ge=3)
    max_rollbacks: Int = setting(
        "rollbacks allowed before the run aborts (a fault that survives them all)", 3, ge=0
    )
    inject: Annotated[dict[str, Any], AsWritten(Injection, check=False)] | None = setting(
        "fault injection for tests, off when null: {step, kind: nan_loss | loss_spike, rank} poisons one "
        "data window's loss; {kind: slow, rank, seconds, step} sleeps `seconds` in every micro-step of "
        "`rank` from optimizer step `step` (default 1) on, a straggler (checked by check_inject where the "
        "settings are read from a profile or train/settings.json)",
        None,
        null=True,
    )


def inject_problem(inject: dict[str, Any] | None) -> Problem | None:
    """``stabiliser.inject``: one fault of a kind of INJECTIONS, with that kind's keys, or null."""
    if inject is None:
        return None
    kind = inject.get("kind")
    if kind not in INJECTIONS:
        return "stabiliser.inject.kind", f"{kind!r} is not one of " + ", ".join(map(repr, INJECTIONS))
    spec = INJECTIONS[kind]
    takes = set(spec.model_fields)
    for key in sorted(set(inject) - takes):
        return f"stabiliser.inject.{key}", f"unknown key for kind {kind} (takes {', '.join(sorted(takes))})"
    for key in sorted(k for k, f in spec.model_fields.items() if f.is_required() and k not in inject):
        return f"stabiliser.inject.{key}", f"required for kind {kind}"
    try:
        spec.model_validate(inject)
    except ValidationError as error:
        key = str(error.errors()[0]["loc"][0])
        return f"stabiliser.inject.{key}", f"{inject[key]!r} {in_file(spec.model_fields[key]).refused}"
    return None


def check_inject(inject: dict[str, Any] | None, where: Where = anywhere) -> None:
    """:func:`inject_problem` as InputError naming the file and key: the profile's check, and the guard of
    train/settings.json, which the loop reads without the profile."""
    raise_problem(inject_problem(inject), where)


class CheckpointSettings(Settings):
    """``checkpoint``: ZeRO checkpoints under results/<profile>/<machine>/checkpoints/, outside the train
    rule's outputs."""

    every_steps: Int = setting("save every N optimizer steps (0 = never)", 100, ge=0)
    keep: Int = setting("complete checkpoints kept (the newest)", 2, ge=1)
    export_fp32: Bool = setting(
        "consolidate the final checkpoint into one fp32 state dict (DeepSpeed's zero_to_fp32; needs "
        "every_steps > 0)",
        False,
    )

    def due(self, step: int, steps: int) -> bool:
        """Is a checkpoint saved after completed step ``step`` of ``steps``? Every ``every_steps``, and
        after the last step when it is to be exported."""
        if not self.every_steps:
            return False
        return step % self.every_steps == 0 or (step == steps and self.export_fp32)


class EvaluationSettings(Settings):
    """``evaluation``: validation loss before training, every every_steps steps and at the end
    (zerogate.train.evaluate)."""

    every_steps: Int = setting("evaluate every N optimizer steps; 0 = four times per run", 0, ge=0)
    validation_rows: Int = setting("validation rows the loss is averaged over", 64, ge=1)
    exact_match_items: Int = setting(
        "held-out built-in items greedily decoded (built-in dataset only)", 20, ge=0
    )
    max_new_tokens: Int = setting("greedy decoding length for exact match", 16, ge=1)

    def interval(self, steps: int) -> int:
        """Optimizer steps between two evaluations during a run of ``steps``."""
        return self.every_steps or max(1, steps // 4)


def checkpoint_needs_problem(
    stabiliser: StabiliserSettings, checkpoint: CheckpointSettings
) -> Problem | None:
    """Settings that need saved checkpoints refuse ``checkpoint.every_steps: 0``: both would pass the
    schema and then crash after training (export) or silently turn rollback into abort."""
    if checkpoint.export_fp32 and not checkpoint.every_steps:
        return (
            "checkpoint.export_fp32",
            "true needs a saved checkpoint to export, but checkpoint.every_steps is 0 "
            "(never save): set every_steps > 0 or export_fp32: false",
        )
    if stabiliser.policy == "rollback" and not checkpoint.every_steps:
        return (
            "stabiliser.policy",
            "rollback needs checkpoints to roll back to, but checkpoint.every_steps is 0 "
            "(never save): set every_steps > 0 or policy: skip or abort",
        )
    return None


def check_checkpoint_needs(
    stabiliser: StabiliserSettings, checkpoint: CheckpointSettings, where: Where = anywhere
) -> None:
    raise_problem(checkpoint_needs_problem(stabiliser, checkpoint), where)


def training_settings(section: dict[str, Any] | None, where: Where = anywhere) -> TrainingSettings:
    return build(TrainingSettings, section, where, "training")


def stabiliser_settings(section: dict[str, Any] | None, where: Where = anywhere) -> StabiliserSettings:
    settings = build(StabiliserSettings, section, where, "stabiliser")
    check_inject(settings.inject, where)
    return settings


def checkpoint_settings(section: dict[str, Any] | None, where: Where = anywhere) -> CheckpointSettings:
    return build(CheckpointSettings, section, where, "checkpoint")
