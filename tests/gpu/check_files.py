"""The GPU check's files that its own parts pass on (tests/gpu/check_results.py writes them; check_search.py
goes on from recorded searches, replan.py re-judges recorded steps): one typed contract each, both sides
reading and writing through it (zerogate.contracts.base.Record: closed, keys with their units as aliases).

- ``steps.jsonl``: one :class:`StepRow` a line;
- ``micro_batch.json``: a list of :class:`MicroBatchRow`, each with its :class:`Probe` list. Rows recorded
  before the check capped the caching allocator below the card's capacity have no ``allocator_cap(bytes)``,
  ``outside_allocator(bytes)`` or ``planned_capacity(bytes)``, and the first calls' no ``plan_fits`` /
  ``plan_may_fit``: those fields are optional.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from zerogate.contracts.base import ContractError, Record

STEPS_FILE = "steps.jsonl"
MICRO_BATCH_FILE = "micro_batch.json"


class StepRow(Record):
    """One optimizer step of a run of the check: the CUDA readings (null where the machine cannot take one,
    its reason under ``absent``), the host's resident peak, the step time, the loss and the loss scale."""

    point: str
    step: int
    tensor_peak_bytes: int | None = Field(alias="tensor_peak(bytes)")  # torch.cuda.max_memory_allocated
    allocator_peak_bytes: int | None = Field(alias="allocator_peak(bytes)")  # max_memory_reserved
    device_peak_nvml_bytes: int | None = Field(alias="device_peak_nvml(bytes)")  # the process on NVML
    resident_peak_bytes: int | None = Field(alias="resident_peak(bytes)")
    step_time_s: float = Field(alias="step_time(s)")
    loss: float
    loss_scale: float | None
    skip_reason: str | None
    absent: dict[str, str]  # reading key -> why it was not taken

    def reading(self, key: str) -> int | None:
        """The reading the file holds under ``key`` (``tensor_peak(bytes)``, ...)."""
        name = next(name for name, field in type(self).model_fields.items() if field.alias == key)
        return getattr(self, name)

    def outside_allocator_bytes(self) -> int | None:
        """The device reading (NVML) less the allocator's reserve: what the process held outside the caching
        allocator (CUDA's context, kernels, cuBLAS's workspace, NCCL's communicators); None without both."""
        if self.device_peak_nvml_bytes is None or self.allocator_peak_bytes is None:
            return None
        return self.device_peak_nvml_bytes - self.allocator_peak_bytes


class Probe(Record):
    """One launch of a micro-batch search: ``trained``, ``out of memory``, or why it did not run;
    ``earlier``: taken over from a recorded call's search."""

    micro_batch: int
    outcome: str
    earlier: bool = False


class MicroBatchRow(Record):
    """Per consumer card of the claimed box and point: the plan's largest micro-batch on the card as planned,
    and what the search measured with the caching allocator capped where the card would hold it."""

    point: str
    card: str
    cap_bytes: int  # the card's capacity
    planned_capacity_bytes: int | None = Field(None, alias="planned_capacity(bytes)")
    plan: int
    plan_fits: int | None = None
    plan_may_fit: int | None = None
    outside_allocator_bytes: int | None = Field(None, alias="outside_allocator(bytes)")
    allocator_cap_bytes: int | None = Field(None, alias="allocator_cap(bytes)")
    largest: int | None
    status: str
    probes: list[Probe]

    @property
    def probe_cap(self) -> int:
        """What the probes capped the caching allocator at: rows without a cap capped it at the capacity."""
        return self.cap_bytes if self.allocator_cap_bytes is None else self.allocator_cap_bytes


def read_steps(folder: Path) -> list[StepRow]:
    path = folder / STEPS_FILE
    return [StepRow.of(json.loads(line), f"{path}:{n}") for n, line in enumerate(_lines(path), 1)]


def write_steps(folder: Path, rows: list[StepRow]) -> None:
    (folder / STEPS_FILE).write_text("".join(json.dumps(row.as_json()) + "\n" for row in rows))


def read_micro_batches(folder: Path) -> list[MicroBatchRow]:
    path = folder / MICRO_BATCH_FILE
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise ContractError(str(path), "", "no such file (the GPU check's micro-batch searches)") from None
    if not isinstance(rows, list):
        raise ContractError(str(path), "", "a JSON list of searches was expected")
    return [MicroBatchRow.of(row, f"{path}[{n}]") for n, row in enumerate(rows)]


def write_micro_batches(folder: Path, rows: list[MicroBatchRow]) -> None:
    (folder / MICRO_BATCH_FILE).write_text(json.dumps([row.as_json() for row in rows], indent=2) + "\n")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        raise ContractError(str(path), "", "no such file (the GPU check's steps)") from None
