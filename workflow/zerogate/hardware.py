"""Peak dense FLOP/s per card and dtype: the one table behind MFU (zerogate.train.metrics), the planner's
floor (zerogate.predict.floor) and the machine descriptions (config/machines/*.yaml name the card; the
figure is looked up here, never written there). Also the memory CUDA gives a process on a card, where a
described machine states the chips' capacity (CUDA_CAPACITY). torch-free.

Basis, the same for every card: the fastest dense (no 2:4 sparsity) rate the vendor publishes for
inputs of that dtype, whatever the accumulate precision -- tensor cores for fp16 and bf16, the CUDA
cores' fp32 rate for fp32 (PyTorch does not use TF32 for fp32 matmuls by default). On GeForce cards
fp16 with fp16 accumulate is twice fp16 with fp32 accumulate (which PyTorch's GEMMs use), and bf16
exists only with fp32 accumulate. The basis is an upper bound on any kernel's rate, so the floor stays
a lower bound; MFU is the fraction of that same figure, so MFU is comparable between cards.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.units import GIB

TFLOPS = 1e12


@dataclass(frozen=True)
class Peak:
    """One card's dense peak for one dtype, with where the figure comes from."""

    tflops: float
    accumulate: str  # the accumulate precision of the published figure
    source: str


_ADA = "NVIDIA Ada Lovelace architecture whitepaper v2.1, appendix table 2"
_BLACKWELL = (
    "NVIDIA RTX 5070 family specifications: 988 AI TOPS (FP4, 2:4 sparse); /2 sparsity, /2 per precision "
    "step FP4 -> FP8 -> FP16 (Blackwell whitepaper ratios): a derived upper bound"
)
_A100 = "NVIDIA A100 datasheet (SXM; dense)"
_H100 = "NVIDIA H100/H200 datasheet (SXM; dense; the PCIe card is slower: an upper bound there)"

# Card name fragment (as CUDA reports it, e.g. "NVIDIA GeForce RTX 4090") -> dtype -> peak.
PEAKS: dict[str, dict[str, Peak]] = {
    "RTX 4090": {
        "fp16": Peak(330.3, "fp16", _ADA),
        "bf16": Peak(165.2, "fp32", _ADA + " (bf16 has no fp16-accumulate mode)"),
        "fp32": Peak(82.6, "fp32", _ADA + " (CUDA cores)"),
    },
    "RTX 5070": {
        "fp16": Peak(123.5, "fp16", _BLACKWELL),
        # Not published per accumulate mode: the fp16 figure, an upper bound, keeps the floor a lower bound.
        "bf16": Peak(123.5, "fp32", _BLACKWELL + "; bf16 taken as the fp16 figure (upper bound)"),
        "fp32": Peak(30.9, "fp32", "NVIDIA RTX 5070 specifications (shader TFLOPS)"),
    },
    "A100": {
        "fp16": Peak(312.0, "fp32", _A100),
        "bf16": Peak(312.0, "fp32", _A100),
        "fp32": Peak(19.5, "fp32", _A100),
    },
    "H100": {
        "fp16": Peak(989.4, "fp32", _H100),
        "bf16": Peak(989.4, "fp32", _H100),
        "fp32": Peak(66.9, "fp32", _H100),
    },
    "H200": {
        "fp16": Peak(989.4, "fp32", _H100),
        "bf16": Peak(989.4, "fp32", _H100),
        "fp32": Peak(66.9, "fp32", _H100),
    },
}


def peak(device_name: str | None, dtype: str) -> Peak | None:
    """The table's entry for the card whose name contains a key (None for unknown cards and CPUs)."""
    if not device_name:
        return None
    for fragment, peaks in PEAKS.items():
        if fragment in device_name:
            return peaks.get(dtype)
    return None


def peak_flops(device_name: str | None, dtype: str) -> float | None:
    """Dense peak FLOP/s of the card for ``dtype`` on the table's basis; None when the table lacks it."""
    found = peak(device_name, dtype)
    return None if found is None else found.tflops * TFLOPS


@dataclass(frozen=True)
class CudaCapacity:
    """The device memory CUDA gives a process on one card model, with where the figure comes from."""

    bytes: int
    source: str


# Card name fragment -> what CUDA reports as the card's total memory: cudaMemGetInfo's total, which torch's
# out-of-memory message prints as "total capacity". It is less than the chips' capacity, and than NVML's and
# cudaGetDeviceProperties' totals, by what the driver reserves for itself, so no allocation can use it. The
# figures are the median of published out-of-memory messages; they vary a little with the driver (the range
# is given).
CUDA_CAPACITY: dict[str, CudaCapacity] = {
    "RTX 4090": CudaCapacity(
        round(23.645 * GIB),
        "torch out-of-memory messages on RTX 4090s: 'total capacity' 23.61-23.68 GiB (TRI-ML/packnet-sfm#250 "
        "and "
        "MotrixLab/AiOS#29 23.65, ali-vilab/VGen#104 and 3DTopia/Phidias-Diffusion#8 23.64, "
        "zai-org/CogVideo#36 "
        "23.68, pinokiofactory/flux-webui#11 23.61), against 24564 MiB (23.99 GiB) in nvidia-smi",
    ),
    "RTX 3090": CudaCapacity(
        round(23.69 * GIB),
        "torch out-of-memory messages on RTX 3090s: 'total capacity' 23.68-23.70 GiB (JiaweiLian/AP-PA#3 "
        "23.69, "
        "LambdaLabsML/examples#48 23.68, GaoLii/DSP#10 23.70), against 24576 MiB in nvidia-smi",
    ),
}


def cuda_capacity(device_name: str | None) -> CudaCapacity | None:
    """The table's CUDA capacity for the card whose name contains a key (None for cards it lacks)."""
    if not device_name:
        return None
    for fragment, capacity in CUDA_CAPACITY.items():
        if fragment in device_name:
            return capacity
    return None


def training_flops_per_token(
    parameters: int, layers: int, hidden: int, seq_len: int, recompute: bool = False
) -> float:
    """FLOPs of one token's forward + backward: the one definition behind MFU (zerogate.train.metrics) and the
    floor's compute term (zerogate.predict.floor). 6 per parameter (2 forward, 4 backward) plus the attention
    scores and values the parameter count misses, 12 x layers x hidden x seq_len (Kaplan et al. 2020;
    PaLM, Chowdhery et al. 2022, appendix B, the MFU accounting). Full activation checkpointing runs the
    forward again: 8 per parameter and 16 x layers x hidden x seq_len. These are real FLOPs of the step, so a
    floor built on them stays a lower bound."""
    per_parameter, attention = (8.0, 16.0) if recompute else (6.0, 12.0)
    return per_parameter * parameters + attention * layers * hidden * seq_len
