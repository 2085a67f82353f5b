"""The profile's sections that say what is trained: ``model`` (where it comes from and its shape: shape
keys or a Hugging Face config.json) and ``dataset`` (where the rows come from and how they are
tokenised), with the check of how a shape is stated (:func:`model_shape_problem`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from zerogate.config.base import (
    AsWritten,
    Bool,
    Int,
    Number,
    OptionalNumber,
    Problem,
    Settings,
    Str,
    Unique,
    Where,
    anywhere,
    require,
    setting,
    when,
)
from zerogate.config.validation import build

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
# The transformers families a shape-only model is built from keys in; any other comes through model.config.
SHAPE_ARCHITECTURES = ("llama", "qwen2")
ATTENTIONS = ("sdpa", "eager")
# What a shape-only model needs stated without a config (hidden_size besides: every model needs it).
SHAPE_ONLY_KEYS = ("num_hidden_layers", "num_attention_heads", "intermediate_size")


class ModelSettings(Settings):
    """``model``: where the model comes from and its shape: shape numbers, or a Hugging Face
    ``config.json``. A config replaces the shape keys a parent profile states (they are not inherited
    beside it)."""

    FILE_RULES = (
        require(when(absent=("config",)), ["hidden_size"]),
        require(
            when({"source": "shape"}, absent=("config",)),
            ["architecture", "hidden_size", *SHAPE_ONLY_KEYS],
        ),
    )

    source: Str = setting(
        '"shape" (random init), a local HF directory or .gguf file, package:MODULE/FILE (a file inside an '
        "installed Python package) or hub:ORG/NAME (used from the cache; downloaded only when online); "
        "see zerogate.model.sources",
        "shape",
        filled=True,
    )
    config: Str | None = setting(
        "a Hugging Face config.json (or a directory holding one), relative to the repository (config/models/ "
        "ships some): the model's whole shape, any architecture transformers builds with "
        "AutoModelForCausalLM; replaces the shape keys (filled from it, never stated beside it)",
        None,
        min_length=1,
    )
    attention: Literal["sdpa", "eager"] = setting(
        "attention implementation the model trains and is planned with (transformers' attn_implementation)",
        "sdpa",
        filled=True,
    )
    architecture: Str | None = setting(
        "transformers family built from the shape keys (llama, qwen2); with a config, its model_type",
        None,
        schema={"enum": list(SHAPE_ARCHITECTURES)},
    )
    hidden_size: Int | None = setting(
        'hidden size: resolves DeepSpeed\'s "auto" buckets; checked against a pretrained model (required '
        "without a config)",
        None,
        ge=1,
    )
    num_hidden_layers: Int | None = setting("decoder layers", None, ge=1)
    num_attention_heads: Int | None = setting("attention heads", None, ge=1)
    num_key_value_heads: Int | None = setting(
        "key/value heads (grouped-query attention); default: the attention heads", None, ge=1
    )
    intermediate_size: Int | None = setting("MLP intermediate size", None, ge=1)
    vocab_size: Int | None = setting(
        "a fixed vocabulary (a published model's); default: dataset.vocab_size", None, ge=1
    )
    tie_word_embeddings: Bool | None = setting("lm_head shares the embedding", None)
    parameters: OptionalNumber = setting("parameter count of a pretrained model, for the record", None, ge=0)

    @property
    def shape_only(self) -> bool:
        """Random initialisation from the shape (no pretrained weights)."""
        return self.source == "shape"


def model_shape_problem(model: ModelSettings) -> Problem | None:
    """A shape is stated one way: a ``config`` or the shape keys, never both; without a config the keys a
    shape-only model is built from, and ``hidden_size`` always (it resolves DeepSpeed's "auto" buckets);
    the heads dividing what they split."""
    if model.config is not None:
        for key in SHAPE_KEYS:
            if getattr(model, key) is not None:
                return (
                    f"model.{key}",
                    f"stated beside model.config ({model.config} states the whole shape): remove "
                    "it, or remove model.config to state the shape in keys",
                )
        return None
    if model.hidden_size is None:
        return "model.hidden_size", "required (or a model.config stating the whole shape)"
    if not model.shape_only:  # a pretrained model brings its own shape
        return None
    if model.architecture not in SHAPE_ARCHITECTURES:
        return (
            "model.architecture",
            f"{model.architecture!r} is not one of "
            f"{', '.join(SHAPE_ARCHITECTURES)} (other architectures: model.config)",
        )
    for key in SHAPE_ONLY_KEYS:
        if getattr(model, key) is None:
            return f"model.{key}", "required to build a shape-only model (or a model.config)"
    heads = model.num_attention_heads
    if model.hidden_size % heads:
        return "model.num_attention_heads", f"{heads} does not divide hidden_size {model.hidden_size}"
    kv_heads = model.num_key_value_heads or heads
    if heads % kv_heads:
        return "model.num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}"
    return None


DEFAULT_VOCAB_SIZE = 256
BuiltinTask = Literal["reverse", "sort", "add", "length", "repeat"]


class DatasetColumns(Settings):
    """``dataset.columns``: role -> column of a file's rows (instruction/input/output, prompt/response,
    messages, or text)."""

    SCHEMA_EXTRA = {"minProperties": 1}

    instruction: Str | None = setting("the instruction column (alpaca)", None)
    input: Str | None = setting("the optional input column (alpaca)", None)
    output: Str | None = setting("the answer column (alpaca)", None)
    prompt: Str | None = setting("the prompt column", None)
    response: Str | None = setting("the response column", None)
    messages: Str | None = setting("a column of chat messages", None)
    text: Str | None = setting("a column of plain text", None)


class DatasetSettings(Settings):
    """``dataset``: where the training rows come from and how they are tokenised: source "builtin-tasks"
    (generated offline), a local .jsonl/.json/.parquet/.csv/.txt file (relative to the repository), or
    hub:NAME (only when online). See zerogate.data.sources."""

    FILE_RULES = (
        require(
            when({"source": "builtin-tasks"}), ["tasks", "seed", "num_train", "num_validation"], ["columns"]
        ),
    )

    source: Str = setting(
        '"builtin-tasks", a local file (relative to the repository) or hub:NAME', min_length=1
    )
    seq_len: Int = setting("tokens per row; longer rows are handled by too_long", ge=8)
    format: Literal["json", "parquet", "csv", "text"] | None = setting(
        "file type when the extension does not say", None
    )
    columns: Annotated[dict[str, str], AsWritten(DatasetColumns)] | None = setting(
        "role -> column (instruction/input/output, prompt/response, messages, text)", None
    )
    template: Literal["auto", "chat", "builtin", "alpaca", "plain"] = setting(
        "prompt format; auto = the model's chat template if it has one, else builtin (built-in data) or "
        "alpaca",
        "auto",
        filled=True,
    )
    too_long: Literal["error", "drop", "truncate"] | None = setting(
        "rows longer than seq_len; default drop for builtin-tasks, error for files", None
    )
    validation_fraction: Number = setting("share of a file's rows held out for validation", 0.05, gt=0, lt=1)
    max_rows: Int | None = setting("read at most this many rows of a file", None, ge=2)
    subset: Str | None = setting("hub dataset configuration name", None)
    split: Str | None = setting("hub dataset split", None)
    tasks: Annotated[list[BuiltinTask], Field(min_length=1), Unique()] | None = setting(
        "built-in tasks drawn from", None
    )
    seed: Int = setting("seed of the built-in generator and of a file's train/validation split", 0)
    num_train: Int | None = setting("built-in training examples", None, ge=1)
    num_validation: Int | None = setting("built-in validation examples", None, ge=1)
    vocab_size: Int = setting(
        "vocabulary of a shape-only model, and the size of the BPE tokenizer trained for it; a tokenizer "
        "larger than this is refused",
        DEFAULT_VOCAB_SIZE,
        ge=64,
    )

    @property
    def builtin(self) -> bool:
        return self.source == "builtin-tasks"

    @property
    def too_long_rows(self) -> str:
        """What happens to a row longer than seq_len (the source's default when not set)."""
        return self.too_long or ("drop" if self.builtin else "error")


def model_settings(section: dict[str, Any] | None, where: Where = anywhere) -> ModelSettings:
    return build(ModelSettings, section, where, "model")


def dataset_settings(section: dict[str, Any] | None, where: Where = anywhere) -> DatasetSettings:
    return build(DatasetSettings, section, where, "dataset")
