"""What a GPU rank holds beside its tensors' peak, each term with its source and its own uncertainty: the
caching allocator's fragmentation, ZeRO-3's cross-stream reserve, the CUDA context by CUDA's module loading,
and one NCCL communicator per process group. None of them exists on DeepSpeed's CPU accelerator.

Each term has a point figure and a (low, high) interval from what the source leaves open (:data:`Spread`);
the plan's device need is an interval of the levels over those (zerogate.predict.fit)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from zerogate.predict.phases import PHASES, device_levels, phase_bytes
from zerogate.predict.setup import Setup, release
from zerogate.units import MIB


@dataclass(frozen=True)
class Spread:
    """A figure with its interval, bytes: ``low`` <= ``point`` <= ``high``."""

    low: int
    point: int
    high: int

    def scaled(self, factor: int) -> Spread:
        return Spread(self.low * factor, self.point * factor, self.high * factor)


# The CUDA context of one process (driver state and the kernels loaded), by CUDA's module loading. With lazy
# loading (CUDA 11.7+; torch sets CUDA_MODULE_LOADING=LAZY where the user has not, from torch 1.13,
# https://github.com/pytorch/pytorch/pull/86509): 287,047,680 bytes measured with cudaMemGetInfo after one
# small tensor (that PR's description), "around 400MB" with CUDA >= 11.7 (a PyTorch maintainer,
# https://github.com/pytorch/pytorch/issues/109888; the point, read as MiB); by CUDA release, a bare context
# of 256 MiB under torch 2.7.1+cu128 on an RTX 3090 (nvidia-smi, https://github.com/invoke-ai/InvokeAI/issues/
# 9413: the low end) and of 426 MiB under torch 2.10.0+cu130 on an RTX 6000 Ada (nvidia-smi after
# torch.cuda.mem_get_info, https://github.com/unslothai/unsloth-zoo/pull/1053: the high end). Eager loading
# (CUDA < 11.7, or CUDA_MODULE_LOADING=EAGER): 666,632,192 bytes (PR 86509, CUDA_MODULE_LOADING=DEFAULT) to
# ">1000MB" (https://github.com/pytorch/pytorch/issues/107667; a lower bound there, the high end here).
CUDA_CONTEXT_BYTES = {
    "lazy": Spread(low=256 * MIB, point=400 * MIB, high=426 * MIB),
    "eager": Spread(low=666_632_192, point=1000 * MIB, high=1000 * MIB),
}
# The first torch release that sets CUDA_MODULE_LOADING=LAZY (https://github.com/pytorch/pytorch/pull/86509).
LAZY_LOADING_TORCH = (1, 13)
# The first CUDA with lazy module loading, 11.7 (https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#lazy-loading).
LAZY_LOADING_CUDA = (11, 7)


def module_loading(torch_build: str | None) -> str:
    """CUDA's module loading of a torch build as pip names it ("1.13.1+cu116"): "eager" for a torch before
    :data:`LAZY_LOADING_TORCH` or a CUDA before :data:`LAZY_LOADING_CUDA` (the ``+cuXYZ`` local part, read as
    XY.Z), else "lazy"; None (not stated) is torch's default, lazy."""
    if torch_build is None:
        return "lazy"
    version, _, local = torch_build.partition("+")
    cuda = re.fullmatch(r"cu(\d+)(\d)", local)
    cuda_release = (int(cuda.group(1)), int(cuda.group(2))) if cuda else LAZY_LOADING_CUDA
    if release(version) < LAZY_LOADING_TORCH or cuda_release < LAZY_LOADING_CUDA:
        return "eager"
    return "lazy"


# NCCL's device buffers of one communicator. Published: 544 MB for a 2-GPU group after a 4 MB all-reduce
# (4 x A100 with NVLink, https://github.com/NVIDIA/nccl/issues/964), about 1.6 GB per GPU for one
# communicator after an all-reduce, the CUDA context included (https://github.com/NVIDIA/nccl/issues/864; the
# high end is that less the lazy context's low end). NCCL's memory grows with its channels (a maintainer,
# https://github.com/NVIDIA/nccl/issues/986), so a PCIe pair likely needs no more than the NVLink pair: the
# point is the 2-GPU figure.
NCCL_COMMUNICATOR_BYTES = Spread(
    low=544_000_000, point=544_000_000, high=1_600_000_000 - CUDA_CONTEXT_BYTES["lazy"].low
)
# Communicators a ZeRO rank opens: the default (world) group's, which DeepSpeed's barriers use
# (deepspeed/runtime/zero/stage3.py _setup_for_real_optimizer -> dist.barrier(), deepspeed/comm/torch.py
# barrier: group WORLD), and DeepSpeed's data-parallel group, a clone of the world made with new_group
# (deepspeed/utils/groups.py _clone_world_group), which every gather and reduce-scatter uses. torch makes one
# NCCL communicator per process group at its first collective, whatever the group's size: neither
# deepspeed/comm/torch.py (all_reduce, barrier) nor torch/distributed/distributed_c10d.py passes over a
# one-rank group, and DeepSpeed reduces on the data-parallel group at every step (stage3.py: the gradient
# norm's and the overflow check's all_reduce), so one rank holds them too.
ZERO_PROCESS_GROUPS = 2
# The caching allocator's fragmentation: the share of the reserved memory that no live tensor holds at the
# peak, (low, point, high). Published: the GMLake paper (ASPLOS 2024, https://arxiv.org/abs/2401.08156,
# abstract) reduces it by 15 % on average and up to 33 % against PyTorch's caching allocator, over eight LLMs
# fine-tuned with DeepSpeed ZeRO, FSDP and Colossal-AI under recomputation, offload and LoRA on A100-80GB;
# what GMLake leaves is at least 0, so the caching allocator's own is at least that much: point 15 %, high
# 33 %. Low 0: assumed, every freed block reused (large blocks round to kRoundLarge = 2 MiB alone,
# torch/include/c10/core/AllocatorConfig.h). Against it, the unallocated share torch prints when a run
# fails (26 published out-of-memory messages of ZeRO and FSDP runs, each with its address,
# docs/data/published_oom_fragmentation.csv): as wide, so not narrowed (docs/measurements.md).
FRAGMENTATION_OF_RESERVED = (0.0, 0.15, 0.33)


def fragmentation_margin(tensor_peak: int, share: float) -> int:
    """What the allocator reserves above ``tensor_peak`` when ``share`` of its reserve holds no tensor:
    peak / (1 - share) - peak, bytes."""
    return int(tensor_peak * share / (1 - share))


# ZeRO-3's side streams: its gathers run on the all-gather stream (deepspeed/runtime/zero/parameter_offload.py
# __allgather_stream; partitioned_param_coordinator.py fetch_sub_module), and so do the waits that copy each
# parameter out of the gathered buffer (fetch_sub_module waits each handle inside that stream's context;
# partition_parameters.py AllGatherCoalescedHandle.wait: param.data = torch.cat(partitions)), and its bucket
# reductions on
# reduce_and_partition_stream (stage3.py, with overlap_comm, its default); blocks freed there go back to that
# stream's pool (torch/_tensor_docs.py record_stream: "the CUDA caching allocator guarantees that the memory
# will only be reused with the same creation stream"), so the compute stream's peak cannot reuse them.
SIDE_STREAM_TERMS = {
    "all_gather": ("gathered_parameters", "gathered_parameter_copies", "offloaded_partition_copies"),
    "reduce": ("reduce_scatter_buffer", "reduce_scatter_in_backward"),
}

# Where each of these terms comes from (the plan's Ledger.term_sources).
OVERHEAD_SOURCES = {
    "allocator_margin": (
        "the CUDA caching allocator's fragmentation: 15 % (0-33 %) of what it reserves holds no tensor at "
        "the peak, the average and largest that GMLake removed over eight LLM fine-tunes under ZeRO, FSDP, "
        "recomputation and offload (https://arxiv.org/abs/2401.08156); low 0 assumed (large blocks round to "
        "2 MiB, torch/include/c10/core/AllocatorConfig.h kRoundLarge)"
    ),
    "cross_stream_reserve": (
        "ZeRO-3's side-stream pools the compute stream cannot reuse: the gathered buffers and each "
        "parameter's copy out of them (all-gather stream, deepspeed/runtime/zero/parameter_offload.py "
        "__allgather_stream; partitioned_param_coordinator.py fetch_sub_module waits each fetch in that "
        "stream's context) and the reduce-scatter "
        "buffer (stage3.py reduce_and_partition_stream), record_stream-ed and freed to their own "
        "stream's pool (partition_parameters.py free_param, stage3.py __add_grad_to_ipg_bucket; "
        "torch/_tensor_docs.py record_stream), at the phase where they raise the allocator most (each "
        "phase's transient plus the pools less what it holds of them); low 0: "
        "a failed cudaMalloc flushes the cache and retries (torch/cuda/memory.py memory_stats "
        "num_alloc_retries)"
    ),
    "cuda_context": (
        "the CUDA context: lazy module loading 400 MiB (256-426 MiB; https://github.com/pytorch/pytorch/"
        "issues/109888; CUDA 12.8 https://github.com/invoke-ai/InvokeAI/issues/9413, CUDA 13.0 "
        "https://github.com/unslothai/unsloth-zoo/pull/1053), eager 667-1000 MiB "
        "(https://github.com/pytorch/pytorch/issues/107667)"
    ),
    "communicator": (
        "NCCL's device buffers, one communicator per process group, one rank too (the world group for "
        "DeepSpeed's barriers, deepspeed/comm/torch.py barrier; the data-parallel clone, "
        "deepspeed/utils/groups.py _clone_world_group; no collective passes over a one-rank group, "
        "torch/distributed/distributed_c10d.py): 544 MB-1.3 GB each "
        "(https://github.com/NVIDIA/nccl/issues/964, https://github.com/NVIDIA/nccl/issues/864)"
    ),
}


def cross_stream_reserve(tensors: dict[str, int]) -> int:
    """ZeRO-3's side-stream pools (OVERHEAD_SOURCES["cross_stream_reserve"]) as they raise the allocator's
    peak above the tensor peak, bytes. Each side stream's pool is its largest phase; at every phase (PHASES)
    the allocator holds that phase's transient plus each pool less what the phase itself holds of it; the
    reserve is the largest of those, less the tensor peak's transient. Every phase happens in a step, so the
    phase that decides may be another than the tensor peak's: one that holds few of the pools' blocks while
    they stay reserved."""
    transient = phase_bytes(tensors)
    streams = [
        phase_bytes({name: size for name, size in tensors.items() if name in names})
        for names in SIDE_STREAM_TERMS.values()
    ]
    reserved = max(
        transient[phase] + sum(max(held.values()) - held[phase] for held in streams) for phase in PHASES
    )
    return reserved - max(transient.values())


def overhead_spreads(tensors: dict[str, int], setup: Setup, deepspeed_engine: bool) -> dict[str, Spread]:
    """What a GPU rank holds beside ``tensors`` (its tensor terms), each with its interval: the allocator's
    fragmentation, ZeRO-3's cross-stream reserve (``deepspeed_engine``: DeepSpeed's, not a peer's), the CUDA
    context, and the communicators at any number of ranks (DeepSpeed's two process groups; a peer's one:
    DDP verifies its parameters' shapes over its group at construction, torch/nn/parallel/distributed.py
    _verify_param_shape_across_processes, and FSDP2 gathers over it). None on the CPU accelerator."""
    if setup.device_kind != "cuda":
        return {}
    peak = device_levels(tensors).tensor
    low, point, high = (fragmentation_margin(peak, share) for share in FRAGMENTATION_OF_RESERVED)
    spreads = {"allocator_margin": Spread(low, point, high)}
    if deepspeed_engine and setup.stage == 3:
        reserve = cross_stream_reserve(tensors)
        spreads["cross_stream_reserve"] = Spread(0, reserve, reserve)
    spreads["cuda_context"] = CUDA_CONTEXT_BYTES[setup.cuda_module_loading]
    groups = ZERO_PROCESS_GROUPS if deepspeed_engine else 1
    spreads["communicator"] = NCCL_COMMUNICATOR_BYTES.scaled(groups)
    return spreads


def cuda_overhead(tensors: dict[str, int], setup: Setup, deepspeed_engine: bool = True) -> dict[str, int]:
    """The point figures of :func:`overhead_spreads`, bytes."""
    return {name: s.point for name, s in overhead_spreads(tensors, setup, deepspeed_engine).items()}
