"""One micro-step's activation terms as the ledger takes them: the figures an activation source gives for a
setup (traced from the architecture by zerogate.predict.activations, or the Korthikanti formula for
hand-made counts), the formula itself (the cross-check column), and where each activation term comes from.
torch-free: the traced source lives apart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zerogate.contracts.model import ModelCounts
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import Setup

# Where each activation term comes from (the plan's Ledger.term_sources).
# The trace: the model's own forward and backward (transformers/modeling_utils.py and the architecture's
# modeling file) under torch's fake tensors (torch/_subclasses/fake_tensor.py), what the forward saves seen by
# a torch/autograd/graph.py saved_tensors_hooks pack hook; where not traced, Korthikanti et al. 2022,
# https://arxiv.org/abs/2205.05198.
TRACE_SOURCE = (
    "traced: torch/autograd/graph.py saved_tensors_hooks under torch/_subclasses/fake_tensor.py over "
    "transformers/modeling_utils.py's model; the formula of https://arxiv.org/abs/2205.05198 where not"
)
ACTIVATION_SOURCES = {
    "activations": (
        f"what one micro-step's forward keeps for the backward (zerogate.predict.activations; {TRACE_SOURCE})"
    ),
    "backward_transient": (
        "what the backward holds on top of the kept activations at its peak up to its first "
        "accumulated gradient, weight gradients in flight included (zerogate.predict.trace; "
        f"{TRACE_SOURCE})"
    ),
    "activations_at_first_gradient": (
        "what is alive when the backward's first weight gradient is accumulated: the activations not "
        "yet released and what the backward holds then (zerogate.predict.trace); the activations "
        f"where not traced ({TRACE_SOURCE})"
    ),
    "backward_transient_after_first_gradient": (
        "the backward's peak after its first accumulated gradient above those bytes, each weight "
        f"gradient dropped once accumulated (zerogate.predict.trace; {TRACE_SOURCE})"
    ),
}


@dataclass(frozen=True)
class ActivationFigures:
    """One micro-step's activation terms for a setup, and where they come from."""

    saved_bytes: int  # kept by the forward for the backward
    # held by the backward on top of them at its peak, to its first accumulated gradient
    backward_transient_bytes: int
    basis: str  # "traced" | "formula"
    how: str
    per_layer_bytes: int | None = None
    outside_layers_bytes: int | None = None
    layers: int = 0
    # Traced only: alive at the backward's first accumulated gradient, and its peak after it above that.
    at_first_gradient_bytes: int | None = None
    after_first_gradient_bytes: int = 0
    # Traced only: per phase with activations (forward, backward, backward_from_first_gradient), each of the C
    # allocator's size classes' peak of live bytes (zerogate.predict.trace), {"heap": ..., "mapped": ...}.
    size_classes: dict[str, dict[str, int]] | None = None
    # Traced only: the micro-step's operators beyond its products (zerogate.predict.operator_tally), what the
    # step-time ledger's functional-operator term counts.
    operators: OperatorTally | None = None

    @property
    def weight_gradients_traced(self) -> bool:
        """Whether the backward figures hold the weight gradients in flight (and a tied weight's two
        parts)."""
        return self.at_first_gradient_bytes is not None

    def device_terms(self) -> dict[str, int]:
        """The four activation terms (ACTIVATION_SOURCES) a device holds, bytes: where the backward is not
        traced with its weight gradients, what is alive at the first accumulated gradient is the saved
        activations."""
        return {
            "activations": self.saved_bytes,
            "backward_transient": self.backward_transient_bytes,
            "activations_at_first_gradient": (
                self.saved_bytes if self.at_first_gradient_bytes is None else self.at_first_gradient_bytes
            ),
            "backward_transient_after_first_gradient": self.after_first_gradient_bytes,
        }


# What the ledger asks for a setup's activations (zerogate.predict.activations.TracedActivations traces them).
Activations = Callable[[Setup], ActivationFigures]


def traced_operators(activations: Activations | None, setup: Setup) -> OperatorTally | None:
    """The trace's count of the run's operators beyond its products (None without a trace: formula
    activations, or none given)."""
    return None if activations is None else activations(setup).operators


def activation_bytes(counts: ModelCounts, setup: Setup, checkpointing: bool) -> int:
    """The Korthikanti formula's activations of one micro-batch, logits included: the cross-check column.

    Per decoder layer s*b*h*(34 + 5*a*s/h) bytes in 16-bit (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", eq. 1), scaled by dtype bytes / 2; with full activation
    checkpointing 2*s*b*h per layer (the layer inputs) plus one layer recomputed in full. Logits: s*b*V in
    the training dtype plus the fp32 upcast and its gradient that the loss computes (without the upcast,
    ``setup.loss_in_fp32`` false, the two in the training dtype). Derived for GPT-3-style layers: it knows
    nothing of gated MLPs, another intermediate size, norm upcasts or fused attention.
    """
    s, b, h, a = setup.seq_len, setup.micro_batch, counts.hidden, counts.heads
    scale = setup.dtype_bytes / 2
    per_layer = s * b * h * (34 + 5 * a * s / h) * scale
    layers = (
        (2 * s * b * h * scale * counts.layers + per_layer) if checkpointing else per_layer * counts.layers
    )
    loss_bytes = 4 if setup.loss_in_fp32 else setup.dtype_bytes
    logits = s * b * counts.vocab * (setup.dtype_bytes + 2 * loss_bytes)
    return int(layers + logits)


def formula_activations(counts: ModelCounts) -> Activations:
    """The Korthikanti formula as the activation source (hand-made counts have no architecture to trace)."""

    def figures(setup: Setup) -> ActivationFigures:
        return ActivationFigures(
            activation_bytes(counts, setup, setup.activation_checkpointing),
            0,
            "formula",
            "Korthikanti et al. 2022 eq. 1 (GPT-3-style layers), logits in the dtype and fp32; "
            "no backward transient",
            layers=counts.layers,
        )

    return figures


def no_activations(setup: Setup) -> ActivationFigures:
    """An activation source without activations, for the terms that do not need them (the model states)."""
    return ActivationFigures(0, 0, "none", "not needed")
