"""zerogate's ZeRO prediction: every tensor DeepSpeed allocates for a run, per rank and per memory tier, each
term named with where it comes from (zerogate.predict.zero_states: the model states and the offload's
buffers; zerogate.predict.zero_buffers: gathering, reduction and the optimizer step's copy;
zerogate.predict.activation_figures: one micro-step's activations), then on GPUs what is not a tensor
(zerogate.predict.phases.cuda_overhead)."""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.contracts.model import ModelCounts
from zerogate.predict.activation_figures import (
    ActivationFigures,
    Activations,
    formula_activations,
    no_activations,
)
from zerogate.predict.phases import cuda_overhead, device_levels
from zerogate.predict.setup import Setup
from zerogate.predict.zero_buffers import backward_gradient_terms, fp32_gradient_copy_bytes, reduction_terms
from zerogate.predict.zero_states import (
    host_setup_terms,
    model_state_terms,
    nvme_swap_bytes,
    pinned_terms,
    rank_share,
)

# The tensors each rank holds for the whole run that zerogate.train.held.held_bytes measures.
MODEL_STATES = ("parameters", "master_parameters", "gradients", "optimizer_states")


@dataclass(frozen=True)
class ZeroTerms:
    """zerogate's prediction for one setup, bytes per rank, term by term in each tier."""

    device: dict[str, int]  # tensors and OVERHEAD (zerogate.predict.phases)
    host: dict[str, int]  # offloaded state and HOST_SETUP (zerogate.predict.zero_states)
    nvme: dict[str, int]
    pinned: dict[str, int]  # the pinned share of the host terms
    activations: ActivationFigures  # the figures the activation terms come from

    def model_states(self) -> dict[str, int]:
        """The MODEL_STATES in whichever tier holds them, bytes (0 for a term the scheme does not keep)."""
        merged = {**self.device, **self.host, **self.nvme}
        return {name: merged.get(name, 0) for name in MODEL_STATES}


def zerogate_terms(counts: ModelCounts, setup: Setup, activations: Activations | None = None) -> ZeroTerms:
    """zerogate's prediction for ``setup``, bytes: per-rank ``device`` terms (tensors and OVERHEAD), per-rank
    ``host`` terms (offloaded state, HOST_SETUP), per-rank ``nvme`` terms, and the ``pinned`` share of the
    host terms. ``activations``: the activation source (default: the Korthikanti formula)."""
    figures = (activations or formula_activations(counts))(setup)
    share = rank_share(counts, setup)
    states = model_state_terms(counts, setup, share)
    device = {
        **states.device,
        **reduction_terms(counts, setup),
        **backward_gradient_terms(counts, setup, figures),
        "fp32_gradient_copy": fp32_gradient_copy_bytes(counts, setup, share),
        **figures.device_terms(),
    }
    device.update(cuda_overhead(device, setup))
    swap = nvme_swap_bytes(setup, share)
    return ZeroTerms(
        device=device,
        host={**states.host, **host_setup_terms(counts, setup, swap)},
        nvme=states.nvme,
        pinned=pinned_terms(states.host, setup, swap),
        activations=figures,
    )


def host_need_per_rank(terms: ZeroTerms, on_cpu: bool) -> int:
    """Host RAM one rank needs: its runtime, plus the larger of the model as built at initialisation and
    what it holds in training (offloaded state and swap buffers; on the CPU accelerator every tensor)."""
    host = terms.host
    held = sum(v for k, v in host.items() if k not in ("host_runtime", "model_build"))
    if on_cpu:
        held += device_levels(terms.device).tensor
    return host["host_runtime"] + max(host["model_build"], held)


def model_state_bytes(counts: ModelCounts, setup: Setup) -> dict[str, int]:
    """The four tensors each rank holds for the whole run (MODEL_STATES), as zerogate.train.held.held_bytes
    measures them, bytes, keyed as that record's file keys them (``parameters(bytes)``, ...)."""
    states = zerogate_terms(counts, setup, no_activations).model_states()
    return {f"{name}(bytes)": nbytes for name, nbytes in states.items()}
