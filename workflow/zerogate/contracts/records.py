"""What a training run records (``train/``): one :class:`StepRecord` per optimizer step and rank
(``metrics/rank<N>.jsonl``), what each rank held at the end (``metrics/held_bytes_rank<N>.json``), the loss
stabiliser's events (``events.jsonl``), the evaluations (``eval.jsonl``) and the run's summary
(``summary.json``). The training loop writes these classes and the analysis reads them: the key of every
measurement, with its unit, is spelt once, here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.run import Dtype

# fp16's loss scaler skipped the step (the value of StepRecord.skip_reason that the overflow statistics
# count).
OVERFLOW_REASON = "fp16_overflow"


class StepRecord(Record):
    """One optimizer step of one rank. Times are wall-clock seconds between optimizer-step boundaries
    after a device synchronise; memory is GiB (2^30 bytes), each step's peak (peaks are reset after every
    step). Absent measurements are None (e.g. ``collectives(s)`` with the metrics layer's collective clock
    off, the GPU keys on the CPU accelerator)."""

    step: int
    rank: int
    loss: float  # the window's mean loss over all ranks (all-reduced, so every rank records the same)
    loss_finite: bool
    grad_norm: float | None
    lr: float
    step_time_s: float = Field(alias="step_time(s)")
    micro_step_time_s: float = Field(alias="micro_step_time(s)")  # step_time / accumulation
    micro_step_time_max_s: float | None = Field(None, alias="micro_step_time_max(s)")  # host-side marks
    tokens: int  # non-padding tokens trained on, this rank
    tokens_per_s: float | None  # tokens / step_time, this rank
    elapsed_s: float = Field(alias="elapsed(s)")
    device: str
    # Where the rank runs on several nodes.
    node: int | None = None
    local_rank: int | None = None
    host: str | None = None
    model_flops_per_s: float | None = Field(None, alias="model_flops_per_s(FLOP/s)")
    mfu: float | None = Field(None, alias="mfu(ratio)")
    data_window: int | None = None
    update_applied: bool | None = None
    skip_reason: str | None = None  # OVERFLOW_REASON, or the stabiliser's reason
    loss_scale: float | None = None  # fp16's current loss scale; None without a loss scaler
    skipped_steps_deepspeed: int | None = None  # DeepSpeed's cumulative counter (evidence only)
    collectives_s: float | None = Field(None, alias="collectives(s)")  # host time blocked in collectives
    collective_calls: int | None = None
    rss_gib: float = Field(alias="memory/rss(GiB)")
    peak_rss_gib: float = Field(alias="memory/peak_rss(GiB)")
    allocator_free_gib: float | None = Field(None, alias="memory/allocator_free(GiB)")
    device_peak_gib: float = Field(alias="memory/device_peak(GiB)")  # what the memory gates judge
    device_peak_source: str = Field(alias="memory/device_peak_source")
    max_allocated_gib: float | None = Field(None, alias="memory/max_allocated(GiB)")
    max_reserved_gib: float | None = Field(None, alias="memory/max_reserved(GiB)")
    pinned_host_gib: float | None = Field(None, alias="memory/pinned_host(GiB)")
    nvml_process_peak_gib: float | None = Field(None, alias="memory/nvml_process_peak(GiB)")


def column(name: str) -> str:
    """The steps table's column (and the record's key) of StepRecord field ``name``."""
    return StepRecord.key(name)


class HeldBytes(Artefact):
    """What one rank holds for the whole run at its end (zerogate.train.held.held_bytes): the ledger's
    model-state terms, measured."""

    CONTRACT = "held_bytes"

    rank: int
    world_size: int
    parameters_bytes: int = Field(alias="parameters(bytes)")
    master_parameters_bytes: int = Field(alias="master_parameters(bytes)")
    gradients_bytes: int = Field(alias="gradients(bytes)")
    optimizer_states_bytes: int = Field(alias="optimizer_states(bytes)")
    parameter_count: int
    parameter_dtype: str

    def term(self, name: str) -> int:
        """The held bytes of ledger term ``name`` (parameters, master_parameters, gradients,
        optimizer_states)."""
        return getattr(self, f"{name}_bytes")


class LiveTensorPeak(Artefact):
    """One rank's live-tensor peak over one optimizer step sampled after training, outside the timed steps
    (zerogate.train.live_peak): the CPU accelerator's counterpart of torch.cuda.max_memory_allocated."""

    CONTRACT = "live_tensor_peak"

    rank: int
    step: int  # the data window the sampled step trained on
    peak_bytes: int = Field(alias="peak(bytes)")
    at_start_bytes: int = Field(alias="at_start(bytes)")  # alive when the step began (model states, buffers)
    # Buffers sized by the config, not the model (the gradient buckets), measured: their storages' bytes.
    buffers_bytes: dict[str, int] = Field(alias="buffers(bytes)")
    seconds: float
    how: str


class StabiliserEvent(Record):
    """One loss-stabiliser event on one rank: a non-finite loss or gradient norm, or a spike, and what the
    policy did."""

    step: int
    rank: int
    kind: str  # nonfinite_loss | nonfinite_grad_norm | loss_spike
    value: float | str | None  # "nan"/"inf" as strings: JSON has no non-finite numbers
    action: str
    detail: str = ""


class EvalRecord(Record):
    """One evaluation (rank 0): the validation loss per learned token and, on the built-in dataset, exact
    match."""

    step: int
    phase: Literal["before", "during", "after"]
    validation_loss: float = Field(alias="validation/loss")
    validation_tokens: int = Field(alias="validation/tokens")
    validation_rows: int = Field(alias="validation/rows")
    exact_match_accuracy: float | None = Field(None, alias="exact_match/accuracy")
    exact_match_correct: int | None = Field(None, alias="exact_match/correct")
    exact_match_items: int | None = Field(None, alias="exact_match/items")
    exact_match_by_task: dict[str, list[int]] | None = Field(None, alias="exact_match/by_task")
    eval_time_s: float = Field(alias="eval_time(s)")


class StabiliserSummary(Record):
    policy: str
    skipped_steps: int
    rollbacks: int
    skipped_windows: list[int]


class GitState(Record):
    commit: str | None
    dirty: bool | None


class TrainSummary(Artefact):
    """Rank 0's summary of a finished run: its absence means the run did not finish."""

    CONTRACT = "train_summary"

    completed_steps: int
    resumed_from_step: int | None
    stabiliser: StabiliserSummary
    world_size: int
    parameters: int
    wall_time_s: float = Field(alias="wall_time(s)")
    metrics_time_s: float = Field(alias="metrics_time(s)")  # what the metrics layer added to the loop
    dtype: Dtype
    accelerator: str
    git: GitState
    engine: str = "deepspeed"  # what trained: the DeepSpeed engine or a baseline (zerogate.runtime.engines)
