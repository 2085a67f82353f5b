"""The table of published setups (config/published_setups/setups.yaml), typed: what other people published
about DeepSpeed ZeRO memory, row by row, with the facts a planner needs to reproduce each figure.

Three kinds of row (config/published_setups/README.md explains every key):

- ``estimator_table``: a figure DeepSpeed's memory estimator (or memory.rst's hand calculation) printed for
  parameter counts, with how the counts and the figure were rounded when printed;
- ``paper_figure``: a model-state figure of the ZeRO paper, with its printed precision;
- ``measured``: a run someone made: model config, ZeRO stage, offloads, precision, geometry, hardware, and
  what happened (it trained, it ran out of memory, the largest micro-batch that fit, a memory reading).

``read_setups`` refuses a malformed table before anything is planned, with one line naming the file, the
row (index and id) and the key. Pure Python and pydantic: no torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from zerogate.config.tables import read_yaml, refuse_duplicate_ids
from zerogate.contracts.base import Record
from zerogate.errors import InputError

Rounding = Literal["nearest", "truncated", "floor"]
Offload = Literal["none", "cpu", "nvme"]
Dtype = Literal["fp16", "bf16", "fp32"]
Attention = Literal["sdpa", "eager", "flash_attention_2", "unknown"]
Positive = Annotated[int, Field(ge=1)]
# A DeepSpeed release as its numbers, "0.19.6" (zerogate.predict.setup.release orders them).
Release = Annotated[str, Field(pattern=r"^\d+(\.\d+)*$")]
# A torch build as pip names it, "1.13.1+cu116" (the local part names the CUDA it was built with) or "2.5.1".
TorchBuild = Annotated[str, Field(pattern=r"^\d+(\.\d+)*(\+cu\d{3,})?$")]


class Source(Record):
    """Where the row's figures were published: the address, the place in it and a verbatim quote."""

    url: str
    title: str
    where: str
    quote: str


class PublishedRow(Record):
    """What every row has: its id, its source, and what was inferred (``notes``). ``held_out``: the row was
    added, with others, in one commit and judged by the planner as it stood before any term changed because
    of it (docs/measurements.md, "Held-out published rows")."""

    id: str
    source: Source
    notes: str = ""
    held_out: bool = False


class EstimatedModel(Record):
    """The parameter counts a printed estimate was computed from, and how precisely they were printed:
    ``count_resolution`` (parameters per printed unit, e.g. 1e6 for '2851M') with ``count_rounding``;
    both absent when the counts are exact (an estimator called with the numbers given)."""

    name: str
    parameters: Annotated[float, Field(gt=0)]
    largest_layer_parameters: Annotated[float, Field(gt=0)] | None = None
    count_resolution: Annotated[float, Field(gt=0)] | None = None
    count_rounding: Literal["nearest", "truncated"] | None = None

    @model_validator(mode="after")
    def _resolution_with_rounding(self) -> EstimatedModel:
        if (self.count_resolution is None) != (self.count_rounding is None):
            raise ValueError("count_resolution and count_rounding go together (both absent: exact counts)")
        return self


class PrintedFigures(Record):
    """Figures as printed, converted to bytes: ``unit_bytes`` per printed unit, printed to
    ``printed_resolution`` units, rounded by ``printed_rounding`` (floor: Python's ``>> 20``)."""

    per_gpu_bytes: Annotated[int, Field(ge=0)]
    per_cpu_bytes: Annotated[int, Field(ge=0)] | None = None
    unit_as_printed: str
    unit_bytes: Positive
    printed_resolution: Annotated[float, Field(gt=0)]
    printed_rounding: Literal["nearest", "floor"]


class EstimatorSetup(Record):
    """The estimator's options as the table was printed."""

    zero_stage: Literal[2, 3]
    offload_optimizer: Literal["none", "cpu"]
    offload_param: Literal["none", "cpu"] | None = None
    gpus_per_node: Positive
    nodes: Positive = 1
    estimator_buffer_factor: Annotated[float, Field(gt=0)] = 1.5
    estimator_mode: Literal["live", "cold"] | None = None  # None: memory.rst's hand calculation
    zero_init: bool | None = None

    @model_validator(mode="after")
    def _options_deepspeed_has(self) -> EstimatorSetup:
        if self.zero_stage == 2 and self.offload_param not in (None, "none"):
            raise ValueError("offload_param: ZeRO-2 has no parameter offload")
        if self.offload_param == "cpu" and self.offload_optimizer != "cpu":
            raise ValueError(
                "offload_param: cpu needs offload_optimizer: cpu (DeepSpeed's estimator has no other case)"
            )
        return self


class EstimatorChange(Record):
    """A change DeepSpeed made to one of the estimator's figures after the row was printed: a DeepSpeed from
    ``deepspeed_version`` on computes that figure by another formula, so it cannot reproduce the printed
    one."""

    figure: Literal["per_gpu", "per_cpu"]
    deepspeed_version: Release  # the first release with the change
    change: str  # where the change is: DeepSpeed's pull request or commit
    formulas: str  # the figure's formula before and after, as the change's diff shows them


class EstimatorRow(PublishedRow):
    kind: Literal["estimator_table"]
    model: EstimatedModel
    setup: EstimatorSetup
    published: PrintedFigures
    changed_since_printed: list[EstimatorChange] = []

    @model_validator(mode="after")
    def _what_the_figures_need(self) -> EstimatorRow:
        if self.setup.zero_stage == 3 and self.model.largest_layer_parameters is None:
            raise ValueError("model.largest_layer_parameters: required for a ZeRO-3 estimate")
        if (
            self.setup.zero_stage == 3
            and self.published.per_cpu_bytes is not None
            and self.setup.zero_init is None
        ):
            raise ValueError(
                "setup.zero_init: required for a ZeRO-3 per-CPU figure (it changes only that figure)"
            )
        for index, change in enumerate(self.changed_since_printed):
            if change.figure == "per_cpu" and self.published.per_cpu_bytes is None:
                raise ValueError(f"changed_since_printed.{index}.figure: the row prints no per-CPU figure")
        return self


class PaperSetup(Record):
    zero_stage: Literal[0, 1, 2, 3]
    offload_optimizer: Literal["none"] = "none"
    offload_param: Literal["none"] = "none"
    dtype: Literal["fp16"] = "fp16"
    gpus_per_node: Positive
    nodes: Positive = 1
    optimizer: str = "adam"


class PaperFigure(Record):
    per_gpu_bytes: Annotated[int, Field(ge=0)]
    unit_as_printed: str
    unit_bytes: Positive
    printed_resolution: Annotated[float, Field(gt=0)]
    printed_rounding: Literal["nearest", "floor"]


class PaperModel(Record):
    name: str
    parameters: Annotated[float, Field(gt=0)]


class PaperRow(PublishedRow):
    kind: Literal["paper_figure"]
    model: PaperModel
    setup: PaperSetup
    published: PaperFigure


class MeasuredModel(Record):
    name: str
    config: str  # a config.json under config/models/, relative to the repository
    parameters: Annotated[float, Field(gt=0)] | None = None


class MeasuredSetup(Record):
    """The run as published. A key is absent when the source does not give it: the row is then judged
    only where the planner does not need it (README: nothing is invented)."""

    zero_stage: Literal[0, 1, 2, 3]
    offload_optimizer: Offload = "none"
    offload_param: Offload = "none"
    dtype: Dtype | None = None
    gpus_per_node: Positive
    nodes: Positive = 1
    micro_batch_per_gpu: Positive | None = None
    seq_len: Positive | None = None
    gradient_accumulation_steps: Positive | None = None
    activation_checkpointing: bool | None = None
    attention: Attention | None = None
    # Whether the loss ran on logits upcast to fp32, as transformers' ForCausalLMLoss (what zerogate trains
    # and plans) does; false where the run's own loss took the 16-bit logits as they are.
    loss_upcast: bool | None = None
    optimizer: str | None = None
    # Other keys of the run's ``zero_optimization`` section as its published config states them (bucket
    # sizes, overlap_comm...): rendered into the plan's DeepSpeed config; DeepSpeed's defaults otherwise.
    zero_optimization: dict[str, bool | int | float] = {}
    # The DeepSpeed release the run used, or the latest it can have used (notes say which and why): the plan
    # is made for that release where the planner knows what changed since (zerogate.predict.ledger); absent,
    # for the installed one.
    deepspeed_version: Release | None = None
    # The transformers release the run used, where the source states it: its loss's copies of the logits are
    # planned for it (zerogate.predict.zero_buffers.loss_logits_terms); absent, the installed one's.
    transformers_version: Release | None = None
    # The torch build the run used, where the source states it: its CUDA decides the context's module loading
    # (zerogate.predict.cuda_terms.module_loading); absent, torch's default (lazy).
    torch_version: TorchBuild | None = None

    @model_validator(mode="after")
    def _offloads_deepspeed_has(self) -> MeasuredSetup:
        stated = {"stage", "offload_optimizer", "offload_param"} & set(self.zero_optimization)
        if stated:
            raise ValueError(
                f"zero_optimization: {', '.join(sorted(stated))} is stated by zero_stage / "
                "offload_optimizer / offload_param"
            )
        if self.offload_param != "none" and self.zero_stage != 3:
            raise ValueError("offload_param: parameter offload needs zero_stage 3")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise ValueError("offload_optimizer: optimizer offload needs a ZeRO stage of 1 or more")
        return self


# The level a published figure was read at (a measured row's ``published.level``), and the plan's level it
# is set against: torch's tensor peak and its caching allocator's peak, the device's memory as nvidia-smi
# (NVML) shows it (zerogate.predict.levels.PEAK_LEVELS); the numbers of a CUDA out-of-memory message (what
# PyTorch had allocated plus what it tried to allocate: the tensors at the failing allocation, so a lower
# bound of the tensor peak); the host's resident memory (the host check's need, zerogate.predict.fit.checks);
# a reading whose tool is not named (the device's level, what must fit). ``outcome``: the row publishes no
# figure, only that the run trained or ran out of memory, judged on the fit checks of the memory it names.
CUDA_LEVEL_OF_METRIC = {
    "torch.cuda.max_memory_allocated": "tensor",
    "torch.cuda.max_memory_reserved": "allocator",
    "nvidia-smi": "device",
}
UNNAMED_METRIC = "unknown"
OOM_MESSAGE = "oom_message"
HOST_RSS = "host_rss"
OUTCOME_ONLY = "outcome"
PLAN_LEVEL_OF = {**CUDA_LEVEL_OF_METRIC, UNNAMED_METRIC: "device", OOM_MESSAGE: "tensor", HOST_RSS: "host"}
ReadAt = Literal[(*CUDA_LEVEL_OF_METRIC, UNNAMED_METRIC, OOM_MESSAGE, HOST_RSS, OUTCOME_ONLY)]


def level_of_metric(metric: str) -> str:
    """The plan's level a figure read at ``metric`` is set against (:data:`PLAN_LEVEL_OF`)."""
    return PLAN_LEVEL_OF[metric]


# Platforms other than native Linux a source may name, and why the planner does not judge a run on them.
UNPLANNED_PLATFORMS = {
    "wsl2": (
        "the planner models native Linux; under WSL2 the Windows driver manages the GPU's memory and limits "
        "the pinned host memory ZeRO-Offload's buffers use (NVIDIA's CUDA on WSL user guide, 'Known "
        "Limitations for Linux CUDA Applications', https://docs.nvidia.com/cuda/wsl-user-guide/index.html; "
        "https://github.com/microsoft/WSL/issues/8447)"
    ),
}


class Hardware(Record):
    gpu: str
    gpu_memory_bytes: Positive  # per GPU, the marketed capacity (README: Units)
    host_ram_bytes: Positive | None = None  # per node, where the source states it
    platform: Literal["linux", "wsl2"] = "linux"  # where the source names another (UNPLANNED_PLATFORMS)


class Outcome(Record):
    """What happened: ``fits`` (it trained) or ``out_of_memory`` in the device's memory or the host's;
    ``largest_micro_batch`` where the source says the batch was the most that fit; the level the row's figure
    was read at (``level``, :data:`PLAN_LEVEL_OF`; ``outcome`` where it publishes no figure) and the figure
    (``peak_bytes``)."""

    outcome: Literal["fits", "out_of_memory"]
    oom_memory: Literal["device", "host"] | None = None
    largest_micro_batch: Positive | None = None
    level: ReadAt
    peak_bytes: Positive | None = None
    unit_as_printed: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Outcome:
        if self.outcome == "out_of_memory" and self.oom_memory is None:
            raise ValueError("oom_memory: required for an out_of_memory outcome (device or host)")
        if self.outcome == "fits" and self.oom_memory is not None:
            raise ValueError("oom_memory: only for an out_of_memory outcome")
        if self.largest_micro_batch is not None and self.outcome != "fits":
            raise ValueError("largest_micro_batch: a largest micro-batch that fit needs outcome fits")
        if (self.peak_bytes is None) != (self.level == OUTCOME_ONLY):
            raise ValueError(
                "level: a figure (peak_bytes) names the level it was read at, and only a row without one "
                "has level outcome"
            )
        return self


class MeasuredRow(PublishedRow):
    kind: Literal["measured"]
    model: MeasuredModel
    setup: MeasuredSetup
    hardware: Hardware
    published: Outcome

    @model_validator(mode="after")
    def _batch_the_maximum_is_of(self) -> MeasuredRow:
        largest, micro = self.published.largest_micro_batch, self.setup.micro_batch_per_gpu
        if largest is not None and micro is not None and largest != micro:
            raise ValueError(
                f"published.largest_micro_batch: {largest} is not the row's micro_batch_per_gpu {micro}"
            )
        return self


Row = Annotated[EstimatorRow | PaperRow | MeasuredRow, Field(discriminator="kind")]


class PublishedSetups(Record):
    setups: list[Row]


_KINDS = ("estimator_table", "paper_figure", "measured")


def _row_problem(file: str, raw: dict, error: ValidationError) -> InputError:
    """pydantic's first problem as one line: the row's index and id, and the key inside the row (a
    cross-field check names its key first, ``key: problem``; a wrong ``kind`` is the key ``kind``)."""
    first = error.errors(include_url=False)[0]
    location = list(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    inner = [str(part) for part in location[2:] if part not in _KINDS]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        inner.append("kind")
    named = re.match(r"([a-z_][a-z0-9_.]*): (.*)", message, flags=re.DOTALL)
    if first["type"] == "value_error" and named:
        inner.append(named.group(1))
        message = named.group(2)
    rows = raw.get("setups")
    if (
        len(location) >= 2
        and location[0] == "setups"
        and isinstance(location[1], int)
        and isinstance(rows, list)
    ):
        index = location[1]
        row = rows[index] if index < len(rows) else None
        row_id = row.get("id") if isinstance(row, dict) else None
        where = f"setups[{index}]" + (f" ({row_id})" if row_id else "")
        return InputError(file, f"{where}: {'.'.join(inner) or '(row)'}", message)
    key = ".".join(str(part) for part in location) or "(top level)"
    return InputError(file, key, message)


def parse_setups(raw: object, file: str) -> PublishedSetups:
    """``raw`` (the parsed YAML) as the typed table; InputError naming ``file``, the row and the key."""
    try:
        table = TypeAdapter(PublishedSetups).validate_python(raw)
    except ValidationError as error:
        raise _row_problem(file, raw if isinstance(raw, dict) else {}, error) from None
    refuse_duplicate_ids((row.id for row in table.setups), file, "setups")
    return table


def read_setups(path: str | Path, file: str | None = None) -> PublishedSetups:
    """The table at ``path``, checked (``file``: the name errors give, as the user wrote it)."""
    shown = file or str(path)
    raw = read_yaml(path, shown)
    if not isinstance(raw, dict):
        raise InputError(shown, "(top level)", "a mapping with one key, setups, was expected")
    return parse_setups(raw, shown)
