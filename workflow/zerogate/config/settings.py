"""A whole profile, typed: :class:`ProfileSettings` holds every section (zerogate.config.training,
model_data, judging, launch), its defaults, and the checks that involve more than one section; what every
rule's parameters are taken from. config/schemas/profile.schema.json is generated from it
(zerogate.config.schemas).

A bad value raises InputError naming the profile file that sets the key and the dotted key, e.g.

    config/profiles/mine.yaml: checkpoint.export_fp32: true needs a saved checkpoint, but
    checkpoint.every_steps is 0

``check_profile`` (zerogate.config.profile, called when the Snakefile loads the profile) builds it, so a
bad profile fails in seconds, before any rule runs. Pure Python: no torch, no pandas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pydantic import model_validator

from zerogate.config.base import Int, Problem, Settings, Str, Where, anywhere, refuse, setting
from zerogate.config.judging import GateSettings, IntervalSettings
from zerogate.config.launch import DeepSpeedSettings, NodesSettings, PlanSettings, PreflightSettings, Variants
from zerogate.config.model_data import DatasetSettings, ModelSettings, model_shape_problem
from zerogate.config.training import (
    CheckpointSettings,
    EvaluationSettings,
    StabiliserSettings,
    TrainingSettings,
    checkpoint_needs_problem,
    inject_problem,
)
from zerogate.config.validation import build


class ProfileSettings(Settings):
    """A zerogate profile (config/profiles/<name>.yaml) after `extends` has been resolved (mappings merge,
    lists replace), typed and cross-checked. Every object is closed: a misspelt key is an error, never
    silently ignored."""

    description: Str = setting("what the profile is for", "", stated=True)
    model: ModelSettings = setting(None, factory=ModelSettings, stated=True)
    deepspeed: DeepSpeedSettings
    training: TrainingSettings
    dataset: DatasetSettings
    stabiliser: StabiliserSettings = setting(None, factory=StabiliserSettings)
    checkpoint: CheckpointSettings = setting(None, factory=CheckpointSettings)
    evaluation: EvaluationSettings = setting(None, factory=EvaluationSettings)
    plan: PlanSettings = setting(None, factory=PlanSettings)
    gates: tuple[GateSettings, ...] = setting(
        "the claims the run is judged against", (), stated=True, min_length=1
    )
    intervals: IntervalSettings = setting(None, factory=IntervalSettings)
    repeats: Int = setting(
        "train the run this many times (seeds training.seed, training.seed + 1, ...; the same data), each a "
        "complete run with its own records; the timing statistics pool them (zerogate.analysis.measures)",
        1,
        ge=1,
        refused="is not a whole number of runs >= 1",
    )
    variant_optimizer_steps: Int | None = setting(
        "the optimizer steps of each comparison run (key variants), at most the run's own (default: the "
        "run's); every variant, ZeRO-3's included, trains this many, so the Choices section compares like "
        "with like",
        None,
        ge=1,
        refused="is not a whole number of optimizer steps >= 1",
    )
    variants: Variants = setting(
        "comparison runs on the same model and data: ZeRO stage and offload, and ZeRO's peers (FSDP2 with "
        "and without its CPU offload) through the same loop; hf-trainer is listed with the reason it does "
        "not run (zerogate.render.variants). Any listed variant adds the report's Choices section (and its "
        "training run to the default target)",
        factory=list,
    )
    preflight: PreflightSettings | None = setting(None, None)
    nodes: NodesSettings | None = setting(None, None)

    @model_validator(mode="after")
    def _cross_checked(self) -> ProfileSettings:
        for problem in cross_field_problems(self):
            refuse(problem)
        return self

    @property
    def variant_steps(self) -> int:
        """The optimizer steps each comparison run (profile key ``variants``) trains:
        ``variant_optimizer_steps``, at most the run's own (a shorter profile, the benchmarks' say, shortens
        its variants too)."""
        steps = self.training.optimizer_steps
        return min(steps, self.variant_optimizer_steps) if self.variant_optimizer_steps else steps

    @property
    def vocab_size(self) -> int:
        """The run's vocabulary: the model's fixed one (a published model's), else the dataset's (a
        shape-only model's, whose tokenizer is trained to that size)."""
        return self.model.vocab_size or self.dataset.vocab_size


def _batch_problem(settings: ProfileSettings) -> Problem | None:
    training = settings.training
    if training.train_batch_size is None:
        return None
    per_rank = training.micro_batch_per_rank * training.gradient_accumulation_steps
    if training.train_batch_size % per_rank:
        return (
            "training.train_batch_size",
            f"{training.train_batch_size} is not micro_batch_per_rank x gradient_accumulation_steps "
            f"({per_rank}) x a whole number of ranks",
        )
    return None


def _timed_steps_problem(settings: ProfileSettings) -> Problem | None:
    excluded, steps = settings.training.warmup_steps_excluded, settings.training.optimizer_steps
    if excluded >= steps:
        return "training.warmup_steps_excluded", f"{excluded} leaves no timed step of {steps}"
    if excluded >= settings.variant_steps:
        return (
            "variant_optimizer_steps",
            f"{settings.variant_steps} leaves no timed step after training.warmup_steps_excluded {excluded}",
        )
    return None


# The checks the JSON schema cannot express, in the order they are made: each names the key to change.
CROSS_FIELD_CHECKS: tuple[Callable[[ProfileSettings], Problem | None], ...] = (
    lambda settings: inject_problem(settings.stabiliser.inject),
    _batch_problem,
    _timed_steps_problem,
    lambda settings: model_shape_problem(settings.model),
    lambda settings: checkpoint_needs_problem(settings.stabiliser, settings.checkpoint),
)


def cross_field_problems(settings: ProfileSettings) -> Iterator[Problem]:
    for check in CROSS_FIELD_CHECKS:
        problem = check(settings)
        if problem is not None:
            yield problem


def profile_settings(profile: dict[str, Any], where: Where = anywhere) -> ProfileSettings:
    """The profile's typed settings, after the cross-field checks (InputError on the first problem, naming
    the file ``where`` gives for its key)."""
    return build(ProfileSettings, profile, where)
