"""Peak dense FLOP/s per card and dtype: the one lookup behind MFU (zerogate.train.metrics), the planner's
floor (zerogate.predict.floor, through zerogate.config.card_figures, where a machine description's stated
peak wins) and the short form of a box. The figures are the card catalogue's (config/cards.yaml, read by
zerogate.config.cards), each with its source; never written here. Also the memory CUDA gives a process on
a card, where a described machine states the chips' capacity (CUDA_CAPACITY). torch-free.

Basis, the same for every card: the fastest dense (no 2:4 sparsity) rate the vendor publishes for
inputs of that dtype, whatever the accumulate precision -- tensor cores for fp16 and bf16, the CUDA
cores' fp32 rate for fp32 (PyTorch does not use TF32 for fp32 matmuls by default). On GeForce cards
fp16 with fp16 accumulate is twice fp16 with fp32 accumulate (which PyTorch's GEMMs use), and bf16
exists only with fp32 accumulate. The basis is an upper bound on any kernel's rate, so the floor stays
a lower bound; MFU is the fraction of that same figure, so MFU is comparable between cards.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.cards import catalogue, find
from zerogate.units import GIB

TFLOPS = 1e12


@dataclass(frozen=True)
class Peak:
    """One card's dense peak for one dtype, with where the figure comes from."""

    tflops: float
    accumulate: str  # the accumulate precision of the published figure
    source: str
    card: str = ""  # the catalogue's name of the card


def peak(device_name: str | None, dtype: str) -> Peak | None:
    """The catalogue's peak of the card ``device_name`` names (zerogate.config.cards.find: the most
    specific name), None for unknown cards, CPUs and dtypes the card lacks."""
    card = find(device_name)
    found = None if card is None else card.peaks.get(dtype)  # type: ignore[call-overload]
    if card is None or found is None:
        return None
    return Peak(found.tflops, found.accumulate, catalogue().source_text(found), card.card)


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


def product_parameters(total: int, vocab: int, hidden: int, tied: bool) -> int:
    """The parameters a token's forward multiplies by: all of them less the input embedding (vocab x
    hidden), which is a lookup, unless it is tied to the output head, whose product uses it. nanoGPT's
    model.py ``get_num_params`` keeps the tied token embedding for that reason and takes out the position
    embedding; Kaplan et al. 2020 (arXiv 2001.08361, section 2.1) count the forward's 2 FLOP per
    non-embedding parameter. Learned position embeddings, also lookups, are not known here and stay in
    (GPT-2 XL's: 1.6 M of 1.56 B)."""
    return total - (0 if tied else vocab * hidden)


def training_flops_per_token(
    parameters: int,
    layers: int,
    hidden: int,
    seq_len: int,
    recompute: bool = False,
    attention_share: float = 1.0,
) -> float:
    """FLOPs of one token's forward + backward: the one definition behind MFU (zerogate.train.metrics) and the
    floor's compute term (zerogate.predict.floor). ``parameters`` are those in products
    (:func:`product_parameters`). 6 per parameter (2 forward, 4 backward) plus the attention
    scores and values the parameter count misses, 12 x layers x hidden x seq_len (Kaplan et al. 2020;
    PaLM, Chowdhery et al. 2022, appendix B, the MFU accounting). Full activation checkpointing runs the
    forward again: 8 per parameter and 16 x layers x hidden x seq_len. ``attention_share``: the part of the
    attention's count the kernel computes (:func:`causal_attention_share`); MFU keeps PaLM's whole count, and
    a floor takes the least share its kernel may compute, so that it stays a lower bound."""
    per_parameter, attention = (8.0, 16.0) if recompute else (6.0, 12.0)
    return per_parameter * parameters + attention_share * attention * layers * hidden * seq_len


# A causal kernel's tiles: FlashAttention-2 works in blocks of 64 or 128 query and key positions (Dao 2023,
# "FlashAttention-2", https://arxiv.org/abs/2307.08691, section 3.3), so the tiles across the diagonal,
# computed whole, add at most half a tile of 128 keys per query to the half below it.
CAUSAL_TILE = 128


def causal_attention_share(kernel: str | None, seq_len: int) -> tuple[float, float]:
    """(least, most) share of the attention's scores and values (:func:`training_flops_per_token`'s whole
    seq_len x seq_len count) that ``kernel``, an attn_implementation, computes under the causal mask.
    FlashAttention's causal kernels skip the key tiles past the diagonal: half the count, which
    FlashAttention's own benchmark takes for a causal pass (Dao-AILab/flash-attention,
    benchmarks/benchmark_flash_attention.py, ``flops(..., causal)``), and the diagonal tiles
    (:data:`CAUSAL_TILE`). transformers' eager attention multiplies every score and masks afterwards
    (models/llama/modeling_llama.py ``eager_attention_forward``): the whole count. torch's SDPA picks its
    kernel at run time: its flash and cuDNN kernels skip as FlashAttention does when ``is_causal`` is set,
    which transformers sets only without an attention mask (integrations/sdpa_attention.py), and its other
    kernels compute every score; so SDPA, a kernel not named and any other lie between half and the whole."""
    skipping = (0.5, min(1.0, 0.5 + CAUSAL_TILE / (2 * seq_len)))
    if kernel == "eager":
        return 1.0, 1.0
    if kernel in ("flash_attention_2", "flash_attention_3"):
        return skipping
    return skipping[0], 1.0
