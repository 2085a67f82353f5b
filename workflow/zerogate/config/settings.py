"""Typed settings: the profile's sections as the code reads them, with every default and every
cross-field check in this one module.

config/schemas/profile.schema.yaml stays the user-facing contract (types, ranges, closed objects);
the dataclasses below add the defaults and the checks that involve more than one key, and are what
the stages read. Each field says what it means in its ``doc``. A bad value raises InputError naming
the profile file that sets the key and the dotted key, e.g.

    config/profiles/mine.yaml: checkpoint.export_fp32: true needs a saved checkpoint, but
    checkpoint.every_steps is 0

``check_profile`` (zerogate.config.profile, called when the Snakefile loads the profile) builds these,
so a bad profile fails in seconds, before any rule runs. Pure Python: no torch, no pandas.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from zerogate.errors import InputError

# Where a dotted key is set: a profile file (from the profile's `extends` chain) or a stand-in name.
Where = Callable[[str], str]


def _anywhere(key: str) -> str:
    return "profile"


def doc(text: str, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A field that documents itself: ``doc`` is kept in the field's metadata (``fields(X)[i].metadata``)."""
    if default is dataclasses.MISSING and "default_factory" not in kwargs:
        return field(metadata={"doc": text}, **kwargs)
    return field(default=default, metadata={"doc": text}, **kwargs)


def _type_ok(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if kind is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, k) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, kind)


def _from_section(cls: type, section: dict[str, Any] | None, prefix: str, where: Where) -> Any:
    """``cls`` from a profile section: unknown keys and ill-typed values refused, defaults filled."""
    section = dict(section or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in section.items():
        dotted = f"{prefix}.{key}"
        if key not in names:
            raise InputError(where(dotted), dotted, "unknown key (not in the schema; misspelt?)")
        if not _type_ok(value, hints[key]):
            raise InputError(where(dotted), dotted, f"{value!r} is not {_type_name(hints[key])}")
    for f in dataclasses.fields(cls):
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if missing and f.name not in section:
            dotted = f"{prefix}.{f.name}"
            raise InputError(where(dotted), dotted, f"required ({f.metadata.get('doc', '')})")
    return cls(**section)


def _type_name(kind: Any) -> str:
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(kind))
    return getattr(kind, "__name__", str(kind).replace("typing.", ""))


@dataclass(frozen=True)
class StabiliserSettings:
    """``stabiliser``: what happens when a step's loss or gradient norm is non-finite or spikes."""

    policy: Literal["abort", "skip", "rollback"] = doc(
        "abort: stop the run; skip: drop the update and the batch; rollback: restore the newest checkpoint "
        "and skip the offending data window (needs checkpoint.every_steps > 0)",
        "skip",
    )
    spike_window: int = doc("optimizer steps of loss history for the rolling robust z-score", 128)
    spike_threshold: float = doc("a loss whose robust z-score exceeds this is a spike", 6.0)
    spike_min_history: int = doc("steps of history before spikes are judged", 20)
    max_rollbacks: int = doc("rollbacks allowed before the run aborts (a fault that survives them all)", 3)
    inject: dict[str, Any] | None = doc(
        "fault injection for tests, off when null: {step, kind: nan_loss | loss_spike, rank} poisons one "
        "data "
        "window's loss; {kind: slow, rank, seconds, step} sleeps `seconds` in every micro-step of `rank` "
        "from "
        "optimizer step `step` (default 1) on, a straggler",
        None,
    )


@dataclass(frozen=True)
class CheckpointSettings:
    """``checkpoint``: ZeRO checkpoints under results/<profile>/<machine>/checkpoints/."""

    every_steps: int = doc("save every N optimizer steps (0 = never)", 100)
    keep: int = doc("complete checkpoints kept (the newest)", 2)
    export_fp32: bool = doc(
        "consolidate the final checkpoint into one fp32 state dict (needs every_steps > 0)", False
    )

    def due(self, step: int, steps: int) -> bool:
        """Is a checkpoint saved after completed step ``step`` of ``steps``? Every ``every_steps``, and
        after the last step when it is to be exported."""
        if not self.every_steps:
            return False
        return step % self.every_steps == 0 or (step == steps and self.export_fp32)


@dataclass(frozen=True)
class EvaluationSettings:
    """``evaluation``: validation loss before training, during it and at the end."""

    every_steps: int = doc("evaluate every N optimizer steps; 0 = four times per run", 0)
    validation_rows: int = doc("validation rows the loss is averaged over", 64)
    exact_match_items: int = doc("held-out built-in items greedily decoded (built-in dataset only)", 20)
    max_new_tokens: int = doc("greedy decoding length for exact match", 16)

    def interval(self, steps: int) -> int:
        """Optimizer steps between two evaluations during a run of ``steps``."""
        return self.every_steps or max(1, steps // 4)


DEFAULT_VOCAB_SIZE = 256


@dataclass(frozen=True)
class DatasetSettings:
    """``dataset``: where the training rows come from and how they are tokenised."""

    source: str = doc('"builtin-tasks", a local file (relative to the repository) or hub:NAME')
    seq_len: int = doc("tokens per row; longer rows are handled by too_long")
    format: str | None = doc("file type when the extension does not say: json, parquet, csv, text", None)
    columns: dict[str, str] | None = doc(
        "role -> column (instruction/input/output, prompt/response, messages, text)", None
    )
    template: Literal["auto", "chat", "builtin", "alpaca", "plain"] = doc(
        "prompt format; auto = the model's chat template if it has one, else builtin (built-in data) or "
        "alpaca",
        "auto",
    )
    too_long: Literal["error", "drop", "truncate"] | None = doc(
        "rows longer than seq_len; default drop for builtin-tasks, error for files", None
    )
    validation_fraction: float = doc("share of a file's rows held out for validation", 0.05)
    max_rows: int | None = doc("read at most this many rows of a file", None)
    subset: str | None = doc("hub dataset configuration name", None)
    split: str | None = doc("hub dataset split", None)
    tasks: list[str] | None = doc("built-in tasks drawn from", None)
    seed: int = doc("seed of the built-in generator and of a file's train/validation split", 0)
    num_train: int | None = doc("built-in training examples", None)
    num_validation: int | None = doc("built-in validation examples", None)
    vocab_size: int = doc(
        "vocabulary of a shape-only model, and the size of the BPE tokenizer trained for it; "
        "a tokenizer larger than this is refused",
        DEFAULT_VOCAB_SIZE,
    )

    @property
    def builtin(self) -> bool:
        return self.source == "builtin-tasks"

    @property
    def too_long_rows(self) -> str:
        """What happens to a row longer than seq_len (the source's default when not set)."""
        return self.too_long or ("drop" if self.builtin else "error")


@dataclass(frozen=True, kw_only=True)
class RunTraining:
    """The profile's ``training`` section as the run sees it: the optimisation it performs. The
    analysis-only key (``warmup_steps_excluded``) is not part of it, so editing that re-judges the run and
    never retrains it or discards its checkpoints."""

    optimizer_steps: int = doc("optimizer steps to train")
    micro_batch_per_rank: int = doc("rows per micro-step per rank")
    gradient_accumulation_steps: int = doc("micro-steps per optimizer step")
    cpu_ranks: int = doc("ranks on a machine without GPUs")
    seed: int = doc("seed of weights and data order")
    optimizer: dict[str, Any] = doc("{type: AdamW | Adam, lr, weight_decay, betas}")
    lr_warmup_steps: int = doc(
        "linear learning-rate warm-up steps of the cosine schedule, at least 1 "
        "(DeepSpeed's WarmupCosineLR refuses 0 and warms up over at least 2)"
    )
    gradient_clipping: float = doc("global gradient-norm clip (0 = off)")
    train_batch_size: int | None = doc(
        "optional; must equal micro_batch_per_rank x accumulation x ranks", None
    )
    activation_checkpointing: bool = doc(
        "recompute each decoder layer's activations in the backward (transformers' gradient checkpointing, "
        "non-reentrant) instead of keeping them: less activation memory, one more forward per micro-step",
        False,
    )
    loss_in_fp32: bool = doc(
        "compute the cross-entropy on the logits upcast to fp32 (transformers' ForCausalLMLoss); false: on "
        "the "
        "logits in the training dtype, as a hand-written nn.CrossEntropyLoss on the model's output does (no "
        "fp32 copy of the logits: less memory at fp16/bf16, the same at fp32)",
        True,
    )


@dataclass(frozen=True, kw_only=True)
class TrainingSettings(RunTraining):
    """``training``: the optimisation the run performs, and which of its steps the timing statistics leave
    out."""

    warmup_steps_excluded: int = doc(
        "analysis only: first steps left out of the timing statistics (never retrains)"
    )

    @property
    def run(self) -> RunTraining:
        """What the run sees (without the analysis-only keys)."""
        return RunTraining(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RunTraining)})


# The keys that state a model's shape. A ``model.config`` (a Hugging Face config.json) states the whole shape
# instead: they are then filled from it (zerogate.config.profile.with_model_config), never stated beside it.
SHAPE_KEYS = (
    "architecture",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "parameters",
)
SHAPE_ARCHITECTURES = ("llama", "qwen2")
ATTENTIONS = ("sdpa", "eager")


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """``model``: where the model comes from and its shape: shape numbers, or a Hugging Face
    ``config.json``."""

    source: str = doc(
        '"shape" (random init), a local HF directory or .gguf file, package:MODULE/FILE or hub:ORG/NAME',
        "shape",
    )
    config: str | None = doc(
        "a Hugging Face config.json (or a directory holding one), relative to the repository: "
        "the model's whole shape, any architecture transformers builds with "
        "AutoModelForCausalLM; replaces the shape keys (filled from it, never stated beside it)",
        None,
    )
    attention: Literal["sdpa", "eager"] = doc(
        "attention implementation the model trains and is planned with (transformers' attn_implementation)",
        "sdpa",
    )
    architecture: str | None = doc(
        "transformers family built from the shape keys (llama, qwen2); with a config, its model_type", None
    )
    hidden_size: int | None = doc(
        'hidden size: resolves DeepSpeed\'s "auto" buckets; checked against a pretrained '
        "model (required without a config)",
        None,
    )
    num_hidden_layers: int | None = doc("decoder layers", None)
    num_attention_heads: int | None = doc("attention heads", None)
    num_key_value_heads: int | None = doc(
        "key/value heads (grouped-query attention); default: the attention heads", None
    )
    intermediate_size: int | None = doc("MLP intermediate size", None)
    vocab_size: int | None = doc(
        "a fixed vocabulary (a published model's); default: dataset.vocab_size", None
    )
    tie_word_embeddings: bool | None = doc("lm_head shares the embedding", None)
    parameters: float | None = doc("parameter count of a pretrained model, for the record", None)

    @property
    def shape_only(self) -> bool:
        """Random initialisation from the shape (no pretrained weights)."""
        return self.source == "shape"


@dataclass(frozen=True)
class PlanSettings:
    """``plan``: train although the planner says the run does not fit, with the reason (a deviation)."""

    allow_infeasible: bool = doc("train anyway when the plan does not fit", False)
    reason: str = doc("why (recorded as a deviation)", "")


@dataclass(frozen=True)
class ConvergenceRuleSettings:
    """A loss_convergence gate's ``convergence`` block (zerogate.analysis.measures.loss_convergence)."""

    initial_steps: int = doc("the initial loss is the median of this many first steps")
    final_fraction: float = doc("the final loss: mean of this last share of the steps (one block)")
    max_rebound: float = doc("largest (final - lowest block mean) / (initial - lowest block mean)")
    min_drop_sigmas: float = doc("smallest (initial - final) / robust sd of the last block")


GateStatistic = Literal[
    "median",
    "p90",
    "max",
    "loss_convergence",
    "nonfinite_count",
    "overflow_skip_fraction",
    "floor_ratio",
    "failed_ranks",
]


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    """One of the profile's ``gates``: a claim, the metric and statistic that test it, and the threshold."""

    name: str = doc("snake_case name")
    claim: str = doc("the claim's words")
    definition: str = doc("what exactly is measured, in words")
    metric: str = doc("the step-record key (with its unit), or the quantity the statistic reads")
    statistic: GateStatistic = doc("how the metric becomes one number")
    comparison: Literal["<", "<=", "==", ">=", ">"] = doc("measured <comparison> threshold passes")
    threshold: float = doc("the claim's number, in ``unit``")
    unit: Literal["s", "GB", "GiB", "ratio", "count"] = doc(
        "the threshold's unit (GB = 10^9 bytes, GiB = 2^30)"
    )
    ranks: Literal["smallest_device", "all"] = doc(
        "memory gates: the ranks on the device with the least memory, or all", "smallest_device"
    )
    convergence: ConvergenceRuleSettings | None = doc("loss_convergence only: its rule", None)


@dataclass(frozen=True)
class IntervalSettings:
    """``intervals``: how the timing statistics' uncertainty is estimated (zerogate.analysis.measures,
    "Intervals"). An analysis setting: editing it re-judges, never retrains."""

    confidence: float = doc("coverage of every timing interval (0.95: a 95 % interval)", 0.95)
    resamples: int = doc("bootstrap resamples per interval", 2000)
    seed: int = doc("seed of the bootstrap: the same records and settings give the same intervals", 0)


@dataclass(frozen=True)
class DeepSpeedSettings:
    """``deepspeed``: the claim's config and the profile's changes to it."""

    template: str = doc("path of the claim's DeepSpeed config, relative to the repository")
    overrides: list[dict[str, Any]] = doc(
        "{path, value, reason} each: a change to the claim's config, with why", default_factory=list
    )


@dataclass(frozen=True)
class ProfileSettings:
    """A whole profile, typed and cross-checked: what every rule's parameters are taken from."""

    model: ModelSettings
    deepspeed: DeepSpeedSettings
    training: TrainingSettings
    dataset: DatasetSettings
    stabiliser: StabiliserSettings
    checkpoint: CheckpointSettings
    evaluation: EvaluationSettings
    plan: PlanSettings
    gates: tuple[GateSettings, ...]
    intervals: IntervalSettings = IntervalSettings()
    repeats: int = 1
    variant_optimizer_steps: int | None = None

    @property
    def variant_steps(self) -> int:
        """The optimizer steps each comparison run (profile key ``variants``) trains:
        ``variant_optimizer_steps``,
        at most the run's own (a shorter profile, the benchmarks' say, shortens its variants too)."""
        steps = self.training.optimizer_steps
        return min(steps, self.variant_optimizer_steps) if self.variant_optimizer_steps else steps

    @property
    def vocab_size(self) -> int:
        """The run's vocabulary: the model's fixed one (a published model's), else the dataset's (a shape-only
        model's, whose tokenizer is trained to that size)."""
        return self.model.vocab_size or self.dataset.vocab_size


INJECT_KINDS = ("nan_loss", "loss_spike", "slow")
# The keys each injection kind takes (required, optional).
INJECT_KEYS = {
    "nan_loss": ({"kind", "step"}, {"rank"}),
    "loss_spike": ({"kind", "step"}, {"rank"}),
    "slow": ({"kind", "seconds"}, {"rank", "step"}),
}


def check_inject(inject: dict[str, Any] | None, where: Where = _anywhere) -> None:
    """``stabiliser.inject``: one fault, off when null. The schema states the same types; this check also
    guards train/settings.json, which the loop reads without the schema. A bad value names its key."""
    if inject is None:
        return

    def refuse(key: str, problem: str) -> None:
        dotted = f"stabiliser.inject.{key}" if key else "stabiliser.inject"
        raise InputError(where(dotted), dotted, problem)

    kind = inject.get("kind")
    if kind not in INJECT_KINDS:
        refuse("kind", f"{kind!r} is not one of " + ", ".join(repr(k) for k in INJECT_KINDS))
    required, optional = INJECT_KEYS[kind]
    for key in sorted(set(inject) - required - optional):
        refuse(key, f"unknown key for kind {kind} (takes {', '.join(sorted(required | optional))})")
    for key in sorted(required - set(inject)):
        refuse(key, f"required for kind {kind}")
    for key in ("step", "rank"):
        value = inject.get(key)
        if value is not None and (not _type_ok(value, int) or value < (1 if key == "step" else 0)):
            refuse(key, f"{value!r} is not an integer >= {1 if key == 'step' else 0}")
    if kind == "slow":
        seconds = inject["seconds"]
        if not _type_ok(seconds, float) or not 0 < seconds < float("inf"):
            refuse("seconds", f"{seconds!r} is not a number of seconds > 0 (the extra time per micro-step)")


def stabiliser_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> StabiliserSettings:
    settings = _from_section(StabiliserSettings, section, "stabiliser", where)
    check_inject(settings.inject, where)
    return settings


def checkpoint_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> CheckpointSettings:
    return _from_section(CheckpointSettings, section, "checkpoint", where)


def evaluation_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> EvaluationSettings:
    return _from_section(EvaluationSettings, section, "evaluation", where)


def dataset_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> DatasetSettings:
    return _from_section(DatasetSettings, section, "dataset", where)


def training_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> TrainingSettings:
    return _from_section(TrainingSettings, section, "training", where)


def model_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> ModelSettings:
    return _from_section(ModelSettings, section, "model", where)


def plan_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> PlanSettings:
    return _from_section(PlanSettings, section, "plan", where)


def interval_settings(section: dict[str, Any] | None, where: Where = _anywhere) -> IntervalSettings:
    settings = _from_section(IntervalSettings, section, "intervals", where)
    if not 0 < settings.confidence < 1:
        raise InputError(
            where("intervals.confidence"),
            "intervals.confidence",
            f"{settings.confidence!r} is not a coverage between 0 and 1 (0.95 for a 95 % interval)",
        )
    if settings.resamples < 100:
        raise InputError(
            where("intervals.resamples"),
            "intervals.resamples",
            f"{settings.resamples!r} resamples cannot place a percentile interval's ends (at least 100)",
        )
    return settings


def variant_steps_setting(value: Any, where: Where = _anywhere) -> int | None:
    """``variant_optimizer_steps``: the comparison runs' optimizer steps (None: the run's own)."""
    if value is None:
        return None
    if not _type_ok(value, int) or value < 1:
        raise InputError(
            where("variant_optimizer_steps"),
            "variant_optimizer_steps",
            f"{value!r} is not a whole number of optimizer steps >= 1",
        )
    return int(value)


def repeats_setting(value: Any, where: Where = _anywhere) -> int:
    """``repeats``: how many times the run is trained (seeds training.seed, +1, ...; the same data)."""
    if value is None:
        return 1
    if not _type_ok(value, int) or value < 1:
        raise InputError(where("repeats"), "repeats", f"{value!r} is not a whole number of runs >= 1")
    return int(value)


def gate_settings(gates: list[dict[str, Any]] | None, where: Where = _anywhere) -> tuple[GateSettings, ...]:
    typed = []
    for index, gate in enumerate(gates or []):
        gate = dict(gate)
        rule = gate.pop("convergence", None)
        convergence = (
            None
            if rule is None
            else _from_section(ConvergenceRuleSettings, rule, f"gates.{index}.convergence", where)
        )
        typed.append(
            dataclasses.replace(
                _from_section(GateSettings, gate, f"gates.{index}", where), convergence=convergence
            )
        )
    return tuple(typed)


def profile_settings(profile: dict[str, Any], where: Where = _anywhere) -> ProfileSettings:
    """The profile's typed settings, after the cross-field checks below (InputError on the first problem)."""
    settings = ProfileSettings(
        model=model_settings(profile.get("model"), where),
        deepspeed=_from_section(DeepSpeedSettings, profile.get("deepspeed"), "deepspeed", where),
        training=training_settings(profile.get("training"), where),
        dataset=dataset_settings(profile.get("dataset"), where),
        stabiliser=stabiliser_settings(profile.get("stabiliser"), where),
        checkpoint=checkpoint_settings(profile.get("checkpoint"), where),
        evaluation=evaluation_settings(profile.get("evaluation"), where),
        plan=plan_settings(profile.get("plan"), where),
        gates=gate_settings(profile.get("gates"), where),
        intervals=interval_settings(profile.get("intervals"), where),
        repeats=repeats_setting(profile.get("repeats"), where),
        variant_optimizer_steps=variant_steps_setting(profile.get("variant_optimizer_steps"), where),
    )
    check_cross_fields(settings, where)
    return settings


def check_cross_fields(settings: ProfileSettings, where: Where = _anywhere) -> None:
    """The checks the JSON schema cannot express: each names the key to change."""

    def refuse(key: str, problem: str) -> None:
        raise InputError(where(key), key, problem)

    training, model = settings.training, settings.model
    if training.train_batch_size is not None:
        per_rank = training.micro_batch_per_rank * training.gradient_accumulation_steps
        if training.train_batch_size % per_rank:
            refuse(
                "training.train_batch_size",
                f"{training.train_batch_size} is not micro_batch_per_rank x gradient_accumulation_steps "
                f"({per_rank}) x a whole number of ranks",
            )
    if training.warmup_steps_excluded >= training.optimizer_steps:
        refuse(
            "training.warmup_steps_excluded",
            f"{training.warmup_steps_excluded} leaves no timed step of {training.optimizer_steps}",
        )
    if training.warmup_steps_excluded >= settings.variant_steps:
        refuse(
            "variant_optimizer_steps",
            f"{settings.variant_steps} leaves no timed step after training.warmup_steps_excluded "
            f"{training.warmup_steps_excluded}",
        )
    check_model_shape(model, where)
    if model.shape_only and model.config is None:  # a pretrained model or a config brings its own shape
        heads = model.num_attention_heads
        if heads and model.hidden_size % heads:
            refuse("model.num_attention_heads", f"{heads} does not divide hidden_size {model.hidden_size}")
        kv_heads = model.num_key_value_heads or heads
        if heads and kv_heads and heads % kv_heads:
            refuse("model.num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
    check_checkpoint_needs(settings.stabiliser, settings.checkpoint, where)


def check_model_shape(model: ModelSettings, where: Where = _anywhere) -> None:
    """A shape is stated one way: a ``config`` or the shape keys, never both; without a config the keys a
    shape-only model is built from, and ``hidden_size`` always (it resolves DeepSpeed's "auto" buckets)."""

    def refuse(key: str, problem: str) -> None:
        raise InputError(where(key), key, problem)

    if model.config is not None:
        for key in SHAPE_KEYS:
            if getattr(model, key) is not None:
                refuse(
                    f"model.{key}",
                    f"stated beside model.config ({model.config} states the whole shape): remove "
                    f"it, or remove model.config to state the shape in keys",
                )
        return
    if model.hidden_size is None:
        refuse("model.hidden_size", "required (or a model.config stating the whole shape)")
    if model.shape_only:
        if model.architecture not in SHAPE_ARCHITECTURES:
            refuse(
                "model.architecture",
                f"{model.architecture!r} is not one of "
                f"{', '.join(SHAPE_ARCHITECTURES)} (other architectures: model.config)",
            )
        for key in ("num_hidden_layers", "num_attention_heads", "intermediate_size"):
            if getattr(model, key) is None:
                refuse(f"model.{key}", "required to build a shape-only model (or a model.config)")


def check_checkpoint_needs(
    stabiliser: StabiliserSettings, checkpoint: CheckpointSettings, where: Where = _anywhere
) -> None:
    """Settings that need saved checkpoints refuse ``checkpoint.every_steps: 0``: both would pass the
    schema and then crash after training (export) or silently turn rollback into abort."""

    def refuse(key: str, problem: str) -> None:
        raise InputError(where(key), key, problem)

    if checkpoint.export_fp32 and not checkpoint.every_steps:
        refuse(
            "checkpoint.export_fp32",
            "true needs a saved checkpoint to export, but checkpoint.every_steps is 0 "
            "(never save): set every_steps > 0 or export_fp32: false",
        )
    if stabiliser.policy == "rollback" and not checkpoint.every_steps:
        refuse(
            "stabiliser.policy",
            "rollback needs checkpoints to roll back to, but checkpoint.every_steps is 0 "
            "(never save): set every_steps > 0 or policy: skip or abort",
        )
