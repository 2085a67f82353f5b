"""A rank's predicted peak at every level its accelerator measures: on GPUs the tensor, allocator and device
peaks of its device terms; on the CPU accelerator the live-tensor peak and the resident set (the runtime, the
shm workspace's resident share, every tensor term and the heap glibc keeps: zerogate.predict.host_memory).
The same levels for DeepSpeed's ZeRO schemes and for FSDP2."""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import PredictedPeak
from zerogate.predict.activation_figures import Activations
from zerogate.predict.fsdp2_terms import fsdp2_terms
from zerogate.predict.host_memory import retained_heap_bytes, runtime_terms
from zerogate.predict.phases import (
    ALLOCATOR_OVERHEAD,
    OVERHEAD,
    PERSISTENT,
    PHASES,
    device_levels,
    transient_bytes,
)
from zerogate.predict.setup import Setup
from zerogate.predict.zero_states import HOST_SETUP
from zerogate.predict.zero_terms import ZeroTerms, zerogate_terms

# Which resident-set terms stay for the whole run (what the rank holds between steps) and which come and go
# inside a step (the per-window peak above the window's end): the split the measured per-window peaks
# (memory/peak_rss and memory/rss at the end of each step) can check term by term.
PERSISTENT_TERMS = ("runtime_baseline", "shm_comm_buffer", "retained_heap", *PERSISTENT)
TRANSIENT_TERMS = tuple(dict.fromkeys(name for names in PHASES.values() for name in names))
# The peaks each accelerator measures, what predicts each and the step-record column (or file) it is set
# against.
PEAK_LEVELS = {
    "cuda": (
        ("tensor", "torch.cuda.max_memory_allocated: the tensors' peak"),
        ("allocator", "torch.cuda.max_memory_reserved: the caching allocator's peak"),
        ("device", "NVML's process memory: the device's peak (allocator, CUDA context, communicator)"),
    ),
    "cpu": (
        ("tensor", "live tensor bytes of one sampled optimizer step outside the timed ones"),
        ("resident_set", "resident-set peak of the rank's process (VmHWM)"),
    ),
}
# The level a peak prediction heads with (PeakPrediction.total_bytes), per accelerator.
HEADLINE_LEVEL = {"cpu": "resident_set", "cuda": "allocator"}


@dataclass(frozen=True)
class PeakSplit:
    """A predicted peak as what is held between steps and what a step adds inside it, bytes."""

    persistent: int
    transient: int

    @property
    def total(self) -> int:
        return self.persistent + self.transient


def peak_split(terms: dict[str, int]) -> PeakSplit:
    """The predicted peak as persistent (held between steps) + transient (inside a step), bytes: the
    transient part is the larger of the micro-step's terms and the optimizer step's."""
    persistent = sum(v for k, v in terms.items() if k not in TRANSIENT_TERMS and k not in OVERHEAD)
    overhead = sum(v for k, v in terms.items() if k in OVERHEAD)
    return PeakSplit(persistent=persistent + overhead, transient=transient_bytes(terms))


def tensors_on_cpu(terms: ZeroTerms) -> dict[str, int]:
    """On the CPU accelerator every tensor term is host memory: the host and device tensor terms in one
    mapping (what the live-tensor count sees), without HOST_SETUP and OVERHEAD."""
    merged = {k: v for k, v in {**terms.host, **terms.device}.items() if k not in HOST_SETUP}
    return {k: v for k, v in merged.items() if k not in OVERHEAD}


def cpu_tensor_terms(
    counts: ModelCounts, setup: Setup, activations: Activations | None = None
) -> dict[str, int]:
    """The live-tensor terms of a CPU rank (:func:`tensors_on_cpu` of :func:`zerogate_terms`)."""
    return tensors_on_cpu(zerogate_terms(counts, setup, activations))


def resident_terms(
    terms: ZeroTerms, counts: ModelCounts, setup: Setup, runtime_baseline: int | None
) -> dict[str, int]:
    """A CPU rank's resident-set terms: the runtime's (host_memory.runtime_terms), every tensor term, and
    where the activations are traced the heap glibc keeps (``retained_heap``). Buffers allocated at full size
    but written only in part count as resident only for what is written (an untouched page of a CPU tensor
    is not resident): the reduce bucket holds at most the model's gradients, so it counts at most the model
    (the live-tensor peak counts all of it)."""
    peak = {**runtime_terms(setup, runtime_baseline), **tensors_on_cpu(terms)}
    if "reduce_bucket" in peak:
        peak["reduce_bucket"] = setup.dtype_bytes * min(counts.total, setup.reduce_bucket)
    if "gradient_reduction_buckets" in peak:
        peak["gradient_reduction_buckets"] = min(
            peak["gradient_reduction_buckets"], setup.dtype_bytes * counts.total
        )
    retained = retained_heap_bytes(peak, counts, setup, terms.activations.size_classes)
    if retained is not None:
        peak["retained_heap"] = retained
    return peak


def peak_terms(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> dict[str, int]:
    """Each rank's resident-set (CPU) or device (GPU) terms of its predicted peak, bytes.

    On GPUs the device terms of :func:`zerogate_terms`. On the CPU accelerator the rank's resident-set
    peak (:func:`resident_terms`; ``runtime_baseline``: a process with the training ranks' imports and comm
    backend and no model of the run's, zerogate.runtime.baseline)."""
    terms = zerogate_terms(counts, setup, activations)
    if setup.device_kind != "cpu":
        return dict(terms.device)
    return resident_terms(terms, counts, setup, runtime_baseline)


def device_peak_levels(device: dict[str, int]) -> dict[str, PredictedPeak]:
    """Each level a GPU measures (PEAK_LEVELS["cuda"]) of a rank's ``device`` terms, ZeRO's or FSDP2's:
    bytes and the terms it sums."""
    levels = device_levels(device)
    tensors = {k: v for k, v in device.items() if k not in OVERHEAD}
    named = {
        "tensor": (levels.tensor, tensors),
        "allocator": (
            levels.allocator,
            {**tensors, **{k: device[k] for k in ALLOCATOR_OVERHEAD if k in device}},
        ),
        "device": (levels.device, device),
    }
    return {
        level: PredictedPeak(predicted_bytes=named[level][0], terms_bytes=named[level][1], what=what)
        for level, what in PEAK_LEVELS["cuda"]
    }


def cpu_peak_levels(tensors: dict[str, int], resident: dict[str, int]) -> dict[str, PredictedPeak]:
    """Each level the CPU accelerator measures (PEAK_LEVELS["cpu"]): the live tensors' peak of ``tensors``
    and the resident set's of ``resident``, with the terms each sums."""
    named = {"tensor": tensors, "resident_set": resident}
    return {
        level: PredictedPeak(
            predicted_bytes=peak_split(named[level]).total, terms_bytes=named[level], what=what
        )
        for level, what in PEAK_LEVELS["cpu"]
    }


def peak_levels(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> dict[str, PredictedPeak]:
    """Each peak the accelerator measures (PEAK_LEVELS), predicted: bytes and the terms it sums."""
    terms = zerogate_terms(counts, setup, activations)
    if setup.device_kind != "cpu":
        return device_peak_levels(terms.device)
    return cpu_peak_levels(tensors_on_cpu(terms), resident_terms(terms, counts, setup, runtime_baseline))


def fsdp2_peak_levels(
    counts: ModelCounts, setup: Setup, runtime_baseline: int | None, activations: Activations | None = None
) -> tuple[dict[str, int], dict[str, PredictedPeak]]:
    """(the peak's terms, each level the accelerator measures) under FSDP2, as peak_terms and peak_levels
    give them for DeepSpeed: on the CPU accelerator the runtime baseline and the shm workspace's resident
    share on top of the tensor terms (the rank starts DeepSpeed's comm backend like every other)."""
    tensors = fsdp2_terms(counts, setup, activations)
    if setup.device_kind != "cpu":
        return tensors, device_peak_levels(tensors)
    resident = {**runtime_terms(setup, runtime_baseline), **tensors}
    return resident, cpu_peak_levels(tensors, resident)
