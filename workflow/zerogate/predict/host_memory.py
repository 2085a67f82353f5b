"""What a rank's process holds on the host beyond its tensors: the runtime before any model, the resident
share of DeepSpeed's shm comm workspace, and the freed tensor memory glibc's heap keeps resident (the CPU
accelerator's resident set: zerogate.predict.levels)."""

from __future__ import annotations

from zerogate.contracts.model import ModelCounts
from zerogate.predict.cuda_terms import Spread
from zerogate.predict.phases import ACTIVATION_TERMS, PHASES, transient_bytes
from zerogate.predict.setup import Setup
from zerogate.runtime.heap import size_class_of
from zerogate.units import GIB

# Host RAM of one rank's runtime (interpreter, torch, DeepSpeed, transformers, the comm backend) before any
# model: on the CPU accelerator measured here by zerogate.runtime.baseline (0.55 GB on the smoke profile,
# 2026-12-01; the CPU peak prediction measures it for each run); on GPUs the CUDA libraries' host memory comes
# on top, assumed 2 GiB per rank in all (not measured: no GPU here).
HOST_RUNTIME_BYTES = {"cpu": int(0.6 * GIB), "cuda": 2 * GIB}
# The CUDA runtime's host share is not measured here: assumed 1-3 GiB around the 2 GiB (the CUDA, cuBLAS,
# cuDNN and NCCL libraries mapped by each rank). On the CPU accelerator the figure is exact for the plan (the
# peak prediction measures the baseline per run).
HOST_RUNTIME_CUDA_RANGE = (1 * GIB, 3 * GIB)
# DeepSpeed's shared-memory all-reduce workspace on the CPU accelerator (deepspeed/ops/csrc/cpu/comm/shm.cpp,
# struct allreduce_workspace: 2 * NAIVE_ALLREDUCE_THRESHOLD + 2 * MAX_BUF_SIZE bytes, 1 MiB and 32 MiB), one
# /dev/shm file per rank, mapped by every rank (zerogate.runtime.launch.shm_buffers): 66 MiB (69.2 MB). A page
# of it is resident only once written, and training's collectives go through gloo, not this op (it serves
# inference_all_reduce): each rank writes the state words of its own workspace and reads the others'. So
# the resident share is one page per rank (RssShmem of a cpu-smollm2 rank: 8 kB), the rest is address space.
SHM_WORKSPACE_BYTES = 2 * 1048576 + 2 * 1048576 * 32
PAGE_BYTES = 4096  # the x86-64 base page (os.sysconf("SC_PAGE_SIZE") there): assumed, the machines' CPU
# Terms made of one storage per parameter (each parameter's gathered copy, each parameter's gradient): a
# storage's size class is its parameter's. Every other term is one storage (a flat buffer, one parameter's
# gradient or copy, a bucket) and has the size class of its bytes.
PER_PARAMETER_TERMS = ("gathered_parameter_copies", "window_gradients")

# Where the host runtime term comes from (the plan's Ledger.term_sources).
HOST_RUNTIME_SOURCES = {
    "host_runtime": (
        "a rank's process before any model: measured on the CPU accelerator "
        "(zerogate.runtime.baseline, 0.55 GB here), assumed 2 GiB (1-3 GiB) with the CUDA libraries: "
        "not measured, no GPU here"
    ),
}
# Where the resident-set terms beyond the tensors come from.
RESIDENT_SOURCES = {
    "runtime_baseline": (
        "the runtime's resident set measured in a process without the run's model "
        "(zerogate.runtime.baseline): measured at run time on the machine the prediction is for"
    ),
    "shm_comm_buffer": (
        "the resident page of each other rank's shm comm workspace (deepspeed/ops/csrc/cpu/comm/shm.cpp)"
    ),
    "retained_heap": (
        "on the CPU accelerator, freed tensor memory glibc's heap keeps resident: a storage of at "
        "most 32 MiB comes from the heap, whose freed pages stay for reuse, a larger one is mapped "
        "and unmapped when freed (malloc/malloc.c: the dynamic mmap threshold, "
        "DEFAULT_MMAP_THRESHOLD_MAX; zerogate.runtime.heap), so from the second step on the resident "
        "set holds each size class's own peak over the step's phases, not the peak of their sum: the "
        "sum of the two class peaks less the tensor peak's transient (activations' classes traced, "
        "DeepSpeed's buffers by their storage sizes; no trimming or fragmentation assumed); where "
        "the activations are not traced, not predicted"
    ),
}


def host_runtime_bytes(setup: Setup) -> int:
    """A rank's process before any model (HOST_RUNTIME_BYTES, the ``host_runtime`` term)."""
    return HOST_RUNTIME_BYTES["cpu" if setup.device_kind == "cpu" else "cuda"]


def host_runtime_spread(setup: Setup) -> Spread:
    """The ``host_runtime`` term with its interval: exact on the CPU accelerator, HOST_RUNTIME_CUDA_RANGE on
    GPUs."""
    point = host_runtime_bytes(setup)
    if setup.device_kind == "cpu":
        return Spread(point, point, point)
    return Spread(HOST_RUNTIME_CUDA_RANGE[0], point, HOST_RUNTIME_CUDA_RANGE[1])


def runtime_terms(setup: Setup, runtime_baseline: int | None) -> dict[str, int]:
    """The resident-set terms of a CPU rank before its tensors, bytes: the runtime's own baseline
    (``runtime_baseline``, measured; 0 where it was not) and the resident share of the other ranks' shm comm
    workspaces (the baseline process, a one-rank world, already holds its own workspace's state page)."""
    return {
        "runtime_baseline": int(runtime_baseline or 0),
        "shm_comm_buffer": min(SHM_WORKSPACE_BYTES, PAGE_BYTES * (setup.ranks - 1)),
    }


def heap_bytes_of_term(name: str, nbytes: int, counts: ModelCounts, setup: Setup) -> int:
    """The bytes of term ``name`` (``nbytes`` in all) in storages of glibc's heap size class
    (zerogate.runtime.heap.size_class_of, the class the live-tensor count gives them); the rest of it
    is mapped."""
    if name in PER_PARAMETER_TERMS:
        small = sum(n for n in counts.numels if size_class_of(n * setup.dtype_bytes) == "heap")
        return nbytes * small // max(1, sum(counts.numels))
    return nbytes if size_class_of(nbytes) == "heap" else 0


def retained_heap_bytes(
    terms: dict[str, int], counts: ModelCounts, setup: Setup, size_classes: dict[str, dict[str, int]] | None
) -> int | None:
    """Freed tensor bytes glibc's heap keeps resident at the step's peak (RESIDENT_SOURCES["retained_heap"]):
    the heap class's peak over the phases plus the mapped class's, less the tensor peak's transient. The
    activations' classes per phase are the trace's (``size_classes``); None where they are not traced."""
    if size_classes is None:
        return None
    peaks = {"heap": 0, "mapped": 0}
    for phase, names in PHASES.items():
        phase_classes = {"heap": 0, "mapped": 0}
        for name in names:
            if name in terms and name not in ACTIVATION_TERMS:
                heap = heap_bytes_of_term(name, terms[name], counts, setup)
                phase_classes["heap"] += heap
                phase_classes["mapped"] += terms[name] - heap
        if any(name in terms for name in names if name in ACTIVATION_TERMS):
            for size_class in phase_classes:
                phase_classes[size_class] += size_classes[phase][size_class]
        for size_class in peaks:
            peaks[size_class] = max(peaks[size_class], phase_classes[size_class])
    return max(0, peaks["heap"] + peaks["mapped"] - transient_bytes(terms))
