"""Achievable rates: the fraction of a published or derived peak a real step reaches, bracketed low / high,
for the step-time ledger (zerogate.predict.step_time). The floor (zerogate.predict.floor) uses the peaks
themselves; the ledger divides by peak x fraction, the low fraction giving the interval's high end.

Each fraction names where it comes from: a published measurement a reader can open, or "assumed" with the
reason. The brackets are the uncertainty of the figure as its source states it, never fitted to a step
time: nothing here was tuned to this machine's runs or to a published step time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Achievable:
    """The fraction of a peak a step reaches: at least ``low``, at most ``high`` (0 < low <= high <= 1)."""

    low: float
    high: float
    source: str

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.high <= 1:
            raise ValueError(
                f"an achievable fraction needs 0 < low <= high <= 1, got {self.low}, {self.high}"
            )

    def seconds(self, work: float, peak_per_s: float) -> tuple[float, float]:
        """(low, high) seconds of ``work`` units at ``peak_per_s`` x this fraction (the high fraction gives
        the low seconds)."""
        return work / (peak_per_s * self.high), work / (peak_per_s * self.low)


# The products of the parameters (6 FLOP per parameter and token) on a GPU's tensor cores. High: what dense
# GEMMs at LLM shapes reach on cuBLAS, assumed 0.80 (tile and wave quantisation leave the rest: NVIDIA's
# "Matrix Multiplication Background User's Guide", https://docs.nvidia.com/deeplearning/performance/dl-
# performance-matrix-multiplication/index.html, section "Dimension Quantization Effects"). Low: the end-to-end
# model FLOPs utilisation Megatron-LM reports for GPT models on A100s, 44-52 % of peak with every other
# operation of the step included (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
# Clusters Using Megatron-LM", https://arxiv.org/abs/2104.04473, table 1), read as a floor for the products
# alone: the kernels between them (normalisations, activations, the loss) are a term of their own, their bytes
# through the device's memory (zerogate.predict.step_time_operators); 0.40 leaves the smaller GEMMs of a model
# of small hidden size their tile and wave quantisation (assumed).
GPU_MATMUL = Achievable(
    0.40,
    0.80,
    "low: Megatron-LM's end-to-end 44-52 % of A100 peak (arXiv:2104.04473 table 1), a floor for the products "
    "alone (the kernels between them are the functional operators' term), less a small model's GEMM "
    "quantisation (assumed 0.40); high: cuBLAS dense GEMMs at large shapes, tile quantisation aside (NVIDIA "
    "Matrix Multiplication Background User's Guide; assumed 0.80)",
)
# The attention's scores and values (12 FLOP per layer, hidden unit, position and token). FlashAttention-2
# reaches 50-73 % of A100 peak in the forward and less in the backward (Dao 2023, https://arxiv.org/abs/
# 2307.08691, section 4.1); torch's SDPA dispatches to it or to slower kernels: low assumed 0.30.
GPU_ATTENTION = Achievable(
    0.30,
    0.73,
    "high: FlashAttention-2's forward at 50-73 % of A100 peak (arXiv:2307.08691 section 4.1); low: its "
    "backward is slower and SDPA may fall back to the memory-efficient or math kernel (assumed 0.30)",
)
# Arithmetic on the CPU accelerator against the probe's measured fp32 matmul peak: the peak is itself a
# measurement of a large matmul, so the run's smaller matmuls reach at most that; the low end is assumed.
CPU_ARITHMETIC = Achievable(
    0.25,
    1.0,
    "high: the probe's fp32 matmul peak is a measured large matmul; low: assumed 0.25 for a model's smaller "
    "matmuls, attention and elementwise operations with a rank's share of the cores",
)
# Copies between host and device from pinned (page-locked) host memory over PCIe, as a fraction of the link's
# rate after line encoding (zerogate.predict.floor.pcie_gbps). Low: 11 GB/s host-to-device on a PCIe 3.0 x16
# Titan X = 0.70 of 15.75 GB/s (a reader's measurement on NVIDIA's "How to Optimize Data Transfers in CUDA
# C/C++", https://forums.developer.nvidia.com/t/how-to-optimize-data-transfers-in-cuda-c-c/148400). High:
# transaction-layer framing of a 256 B payload (about 24 B of header, sequence number and CRC) caps a link at
# about 0.91 of its encoded rate (assumed from the PCIe framing).
PCIE_PINNED = Achievable(
    0.70,
    0.91,
    "low: 11 GB/s pinned host-to-device on PCIe 3.0 x16 (NVIDIA developer forum, 'How to Optimize Data "
    "Transfers in CUDA C/C++'); high: PCIe packet framing of 256 B payloads (assumed)",
)
# From pageable host memory the driver copies through a pinned staging buffer, one host memcpy per chunk
# (NVIDIA, "How to Optimize Data Transfers in CUDA C/C++", http://devblogs.nvidia.com/parallelforall/how-
# optimize-data-transfers-cuda-cc/: pageable transfers are slower than pinned ones); how much slower
# depends on the host's memcpy: assumed 0.35-0.70 of the link.
PCIE_PAGEABLE = Achievable(
    0.35,
    0.70,
    "pageable copies staged through a pinned buffer by the driver (NVIDIA developer blog, 'How to Optimize "
    "Data Transfers in CUDA C/C++'); the fraction assumed",
)
# Collectives against a bandwidth figure the description or probe gives: measured figures are the probe's
# line at or below every call (zerogate.predict.collectives.lower_line), published ones a benchmark's best,
# and derived ones a link's peak; NCCL's ring reaches part of a link. Assumed 0.60-1.0.
COLLECTIVE_BANDWIDTH = Achievable(
    0.60,
    1.0,
    "assumed: a measured or published collective bandwidth is its benchmark's best (the probe's line lies at "
    "or below every call), a derived one a link's peak; NCCL's rings and the overlap with compute reach 0.60 "
    "of it at least",
)
# Host memory traffic (CPU Adam, the gradient norm on the host) against the description's memory bandwidth,
# which is the DIMMs' peak (channels x width x transfer rate): STREAM-style streaming reaches part of it.
# Assumed 0.50-0.85 (STREAM triad on servers and desktops, https://www.cs.virginia.edu/stream/, typically
# 60-85 % of the channels' peak; CPU Adam's AVX loop streams four arrays in and three out).
HOST_MEMORY = Achievable(
    0.50,
    0.85,
    "STREAM triad reaches about 60-85 % of the DIMMs' peak (https://www.cs.virginia.edu/stream/); CPU Adam "
    "streams 4 arrays in and 3 out: assumed 0.50-0.85",
)
# Device memory traffic (the fused Adam, the gradient norm on the device) against the datasheet's HBM/GDDR
# bandwidth: assumed 0.60-0.90 (a bandwidth-bound elementwise kernel on a large buffer).
DEVICE_MEMORY = Achievable(
    0.60,
    0.90,
    "assumed: a bandwidth-bound elementwise kernel over a large buffer reaches 60-90 % of the datasheet's "
    "memory bandwidth",
)
