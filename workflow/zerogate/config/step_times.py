"""The table of published step times (config/published_setups/step_times.yaml), typed: how long other
people's DeepSpeed ZeRO (and FSDP) training steps took, row by row, with the run as its source states it.

A row reuses the measured rows' types of ``zerogate.config.published_setups`` (the model, the ZeRO setup,
the hardware) and adds what a time needs: which framework ran the sharding, the host and its links as
stated, the published time (seconds per optimizer step or per micro-step, or tokens per second per GPU)
with the part of the step it covers, and ``unstated``: the facts the source leaves out. Nothing unstated
is filled in: the judge brackets it or says the row cannot be judged.

``read_step_times`` refuses a malformed table before anything is predicted, with one line naming the
file, the row (index and id) and the key. Pure Python and pydantic: no torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from zerogate.config.published_setups import Hardware, MeasuredModel, MeasuredSetup, Positive, PublishedRow
from zerogate.config.tables import read_yaml, refuse_duplicate_ids
from zerogate.contracts.base import Record
from zerogate.errors import InputError

# The shipped table (zerogate.bench.step_time_rows judges it; validate_planner reads it).
STEP_TIMES_FILE = "config/published_setups/step_times.yaml"
PositiveFloat = Annotated[float, Field(gt=0)]

# The part of a step a published time covers: the whole optimizer step (forward, backward and update of
# every micro-step), forward and backward only (timed up to the end of backward), or the update alone
# (DeepSpeed's wall_clock_breakdown "step" timer: engine.step at the accumulation boundary).
Covers = Literal["optimizer_step", "forward_backward", "optimizer_update"]
Framework = Literal["deepspeed", "fsdp", "fsdp2", "hsdp"]


class StepTimeModel(MeasuredModel):
    """The model; ``config`` absent where no config of its shape is shipped (``shape_as_stated`` says what
    the source gives instead)."""

    config: str | None = None
    shape_as_stated: str = ""


class StepTimeSetup(MeasuredSetup):
    """The run as published (MeasuredSetup's keys; ``gpus_per_node`` absent where the source gives only a
    total) and what a time needs beside them."""

    gpus_per_node: Positive | None = None
    framework: Framework = "deepspeed"
    pin_memory: bool | None = None
    # DeepSpeed's launcher flag --bind_cores_to_rank as the source's command gives it (absent: not given).
    bind_cores_to_rank: bool = False
    activation_checkpointing_detail: str = ""  # e.g. torchtitan's "selective layer"
    # Several samples packed into each row, each attending within itself (varlen attention): the ledger's
    # Setup.packed_samples. Absent: one sequence a row, or packed across samples with one causal attention.
    packed_samples: bool = False


class StepTimeHardware(Hardware):
    """The box as stated: ``total_gpus`` always (the sum of ranks), the GPU's memory where stated or
    implied (notes say which), the host CPU and the links between GPUs and between nodes where stated."""

    gpu_memory_bytes: Positive | None = None
    total_gpus: Positive
    host_cpu: str | None = None
    intra_node_link: str | None = None
    inter_node_link: str | None = None


class PublishedTime(Record):
    """The published figure: seconds (a point, or a range as printed: ``seconds_low``..``seconds_high``)
    per ``per`` (an optimizer step, a micro-step, or an epoch of a dataset the row names), and/or tokens
    per second per GPU; ``covers`` the part of the step."""

    seconds: PositiveFloat | None = None
    seconds_low: PositiveFloat | None = None
    seconds_high: PositiveFloat | None = None
    per: Literal["optimizer_step", "micro_step", "epoch"] = "optimizer_step"
    tokens_per_second_per_gpu: PositiveFloat | None = None
    covers: Covers
    as_printed: str  # the figure as the source prints it, with its unit
    # Where the source does not state the figure's unit: how it was read. The row is shown, never judged.
    unit_unstated: str | None = None

    @model_validator(mode="after")
    def _a_figure(self) -> PublishedTime:
        if self.seconds is None and self.tokens_per_second_per_gpu is None:
            raise ValueError("seconds: a row gives seconds or tokens_per_second_per_gpu")
        if (self.seconds_low is None) != (self.seconds_high is None):
            raise ValueError("seconds_low: a printed range gives both seconds_low and seconds_high")
        if self.seconds_low is not None and self.seconds is None:
            raise ValueError("seconds: a printed range needs its middle in seconds")
        if self.seconds_low is not None and not self.seconds_low <= self.seconds <= self.seconds_high:
            raise ValueError("seconds: outside seconds_low..seconds_high")
        if self.tokens_per_second_per_gpu is not None and self.covers != "optimizer_step":
            raise ValueError("covers: a throughput covers the whole optimizer_step")
        return self


class StepTimeRow(PublishedRow):
    model: StepTimeModel
    setup: StepTimeSetup
    hardware: StepTimeHardware
    published: PublishedTime
    unstated: list[str] = []  # what the source leaves out that a prediction may need
    versions: str = ""  # the software as stated (or "unstated")

    @model_validator(mode="after")
    def _ranks_agree(self) -> StepTimeRow:
        per_node = self.setup.gpus_per_node
        if per_node is not None and per_node * self.setup.nodes != self.hardware.total_gpus:
            raise ValueError(
                f"hardware.total_gpus: {self.hardware.total_gpus} is not gpus_per_node {per_node} x nodes "
                f"{self.setup.nodes}"
            )
        if self.setup.framework != "deepspeed" and (
            self.setup.offload_optimizer != "none" or self.setup.offload_param != "none"
        ):
            raise ValueError("setup.framework: the offload keys describe DeepSpeed's offload only")
        return self


class StepTimes(Record):
    rows: list[StepTimeRow]


def _row_problem(file: str, raw: dict, error: ValidationError) -> InputError:
    """pydantic's first problem as one line: the row's index and id, and the key inside the row (a
    cross-field check names its key first, ``key: problem``)."""
    first = error.errors(include_url=False)[0]
    location = list(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    inner = [str(part) for part in location[2:]]
    named = re.match(r"([a-z_][a-z0-9_.]*): (.*)", message, flags=re.DOTALL)
    if first["type"] == "value_error" and named:
        inner.append(named.group(1))
        message = named.group(2)
    rows = raw.get("rows")
    in_rows = len(location) >= 2 and location[0] == "rows" and isinstance(location[1], int)
    if in_rows and isinstance(rows, list):
        index = location[1]
        row = rows[index] if index < len(rows) else None
        row_id = row.get("id") if isinstance(row, dict) else None
        where = f"rows[{index}]" + (f" ({row_id})" if row_id else "")
        return InputError(file, f"{where}: {'.'.join(inner) or '(row)'}", message)
    return InputError(file, ".".join(str(part) for part in location) or "(top level)", message)


def parse_step_times(raw: object, file: str) -> StepTimes:
    """``raw`` (the parsed YAML) as the typed table; InputError naming ``file``, the row and the key."""
    try:
        table = TypeAdapter(StepTimes).validate_python(raw)
    except ValidationError as error:
        raise _row_problem(file, raw if isinstance(raw, dict) else {}, error) from None
    refuse_duplicate_ids((row.id for row in table.rows), file, "rows")
    return table


def read_step_times(path: str | Path, file: str | None = None) -> StepTimes:
    """The table at ``path``, checked (``file``: the name errors give, as the user wrote it)."""
    shown = file or str(path)
    raw = read_yaml(path, shown)
    if not isinstance(raw, dict):
        raise InputError(shown, "(top level)", "a mapping with one key, rows, was expected")
    return parse_step_times(raw, shown)
