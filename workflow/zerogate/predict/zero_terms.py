"""zerogate's ZeRO prediction: every tensor DeepSpeed allocates for a run, per rank and per memory tier, each
term named with where it comes from (zerogate.predict.zero_states: the model states and the offload's
buffers; zerogate.predict.zero_buffers: gathering, reduction and the optimizer step's copy;
zerogate.predict.activation_figures: one micro-step's activations), then on GPUs what is not a tensor
(zerogate.predict.cuda_terms); the uncertain terms with their intervals."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zerogate.contracts.model import ModelCounts
from zerogate.predict.activation_figures import (
    ActivationFigures,
    Activations,
    formula_activations,
    no_activations,
)
from zerogate.predict.cuda_terms import Spread, overhead_spreads
from zerogate.predict.host_memory import host_runtime_spread
from zerogate.predict.phases import device_levels
from zerogate.predict.setup import Setup
from zerogate.predict.zero_buffers import (
    backward_gradient_terms,
    fp32_gradient_copy_bytes,
    loss_logits_terms,
    optimizer_step_temporaries,
    reduction_terms,
)
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
    # The terms whose figure is uncertain, each with its interval (zerogate.predict.cuda_terms.Spread); every
    # other term is exact: its low and high are its figure.
    device_spreads: dict[str, Spread] = dataclasses.field(default_factory=dict)
    host_spreads: dict[str, Spread] = dataclasses.field(default_factory=dict)

    def device_bounds(self) -> tuple[dict[str, int], dict[str, int]]:
        """The device terms at the low and at the high end of their intervals."""
        return bounds(self.device, self.device_spreads)

    def host_bounds(self) -> tuple[dict[str, int], dict[str, int]]:
        """The host terms at the low and at the high end of their intervals."""
        return bounds(self.host, self.host_spreads)

    def model_states(self) -> dict[str, int]:
        """The MODEL_STATES in whichever tier holds them, bytes (0 for a term the scheme does not keep)."""
        merged = {**self.device, **self.host, **self.nvme}
        return {name: merged.get(name, 0) for name in MODEL_STATES}


def bounds(terms: dict[str, int], spreads: dict[str, Spread]) -> tuple[dict[str, int], dict[str, int]]:
    """``terms`` with each term of ``spreads`` at its low end, and at its high end."""
    low = {k: spreads[k].low if k in spreads else v for k, v in terms.items()}
    high = {k: spreads[k].high if k in spreads else v for k, v in terms.items()}
    return low, high


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
        **optimizer_step_temporaries(counts, setup, share),
        **loss_logits_terms(counts, setup),
        **figures.device_terms(),
    }
    spreads = device_term_spreads(device)
    spreads.update(overhead_spreads(device, setup, deepspeed_engine=True))
    device.update({name: spread.point for name, spread in spreads.items()})
    swap = nvme_swap_bytes(setup, share)
    host = {**states.host, **host_setup_terms(counts, setup, swap)}
    return ZeroTerms(
        device=device,
        host=host,
        nvme=states.nvme,
        pinned=pinned_terms(states.host, setup, swap),
        activations=figures,
        device_spreads=spreads,
        host_spreads={"host_runtime": host_runtime_spread(setup)},
    )


def device_term_spreads(device: dict[str, int]) -> dict[str, Spread]:
    """The intervals of the device's tensor terms that have one: torch's optimizer temporaries, none where
    the client asked for the fused step (BUFFER_SOURCES["optimizer_step_temporaries"])."""
    name = "optimizer_step_temporaries"
    return {name: Spread(0, device[name], device[name])} if name in device else {}


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
