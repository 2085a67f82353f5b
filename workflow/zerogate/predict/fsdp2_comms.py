"""What torch FSDP2 sends, as zerogate.runtime.engines.Fsdp2Engine wraps the model: the ZeRO paper's ZeRO-3
terms per unit, then FSDP2's departures from them, each a named term (zerogate.predict.comms_terms).

``fully_shard`` goes on each decoder layer, then on the root, which holds the rest (embeddings, final norm,
LM head); one call each. Every micro-step all-gathers each unit for its forward, each decoder layer again
for its backward (resharded after its forward) but not the root (``reshard_after_forward`` is False at the
root), and reduce-scatters each unit's gradients, always in fp32 (the engine's reduce dtype); each parameter
is padded along its first dimension to a multiple of N (FSDP2 shards dim 0). At the step,
``clip_grad_norm_`` over the sharded gradients all-reduces one fp32 per parameter (the local norms,
stacked).
"""

from __future__ import annotations

from dataclasses import replace

from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP, Term

# FSDP2 reduce-scatters gradients in fp32 whatever the compute dtype (Fsdp2Engine: no policy in fp32,
# MixedPrecisionPolicy(reduce_dtype=float32) under bf16), and its sharded gradients are fp32.
FSDP2_REDUCE_BYTES = 4


def _paper_terms(counts: ModelCounts, units: int, dtype_bytes: int) -> list[Term]:
    """The paper's ZeRO-3 terms, one call per unit."""
    return [
        Term(
            "forward parameter all-gather",
            "all_gather",
            MICRO_STEP,
            units,
            counts.total * dtype_bytes,
            "each unit (the root, every decoder layer) gathered for its forward (the paper)",
        ),
        Term(
            "backward re-gather",
            "all_gather",
            MICRO_STEP,
            units,
            counts.total * dtype_bytes,
            "resharded after the forward, gathered again for the backward (the paper)",
        ),
        Term(
            "gradient reduce-scatter",
            "reduce_scatter",
            MICRO_STEP,
            units,
            counts.total * FSDP2_REDUCE_BYTES,
            "each unit's gradients reduce-scattered in fp32 after its backward, every micro-batch",
        ),
    ]


def _departures(counts: ModelCounts, world: int, dtype_bytes: int) -> list[Term]:
    """How FSDP2 departs from the paper's terms (zero terms included: the caller drops them)."""
    b, reduce_b = dtype_bytes, FSDP2_REDUCE_BYTES
    layer_indices = [i for unit in counts.decoder_layers() for i in unit]
    return [
        Term(
            "root kept gathered for the backward",
            "all_gather",
            MICRO_STEP,
            -1 if counts.root_indices() else 0,
            -counts.root_numel() * b,
            "reshard_after_forward is False at the root: its parameters stay gathered from forward to "
            "backward",
        ),
        Term(
            "padding to N ranks",
            "all_gather",
            MICRO_STEP,
            0,
            (
                counts.first_dim_padded_numel(world)
                - counts.total
                + counts.first_dim_padded_numel(world, layer_indices)
                - sum(counts.numels[i] for i in layer_indices)
            )
            * b,
            "each parameter is padded along its first dimension to a multiple of N before it is gathered",
        ),
        Term(
            "padding to N ranks (reduce-scatter)",
            "reduce_scatter",
            MICRO_STEP,
            0,
            (counts.first_dim_padded_numel(world) - counts.total) * reduce_b,
            "each gradient is padded along its first dimension to a multiple of N before it is "
            "reduce-scattered",
        ),
        Term(
            "gradient-norm all-reduce",
            "all_reduce",
            BOUNDARY,
            1,
            len(counts.numels) * reduce_b,
            "clip_grad_norm_ over the sharded gradients: each parameter's local norm, stacked, all-reduced "
            "once",
        ),
    ]


def fsdp2_theory(counts: ModelCounts, world: int, dtype_bytes: int) -> list[Term]:
    """The collectives one rank takes part in under torch FSDP2 (the module docstring), per micro-step and
    per boundary: the paper's ZeRO-3 terms, then FSDP2's departures from them."""
    units = counts.layer_units()
    terms = _paper_terms(counts, len(units), dtype_bytes)
    departures = _departures(counts, world, dtype_bytes)
    return terms + [replace(t, departure=True) for t in departures if t.tensor_bytes or t.calls]
