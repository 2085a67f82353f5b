"""A model's parameter counts as the planner counts them (zerogate.model.counts.count_parameters), carried
by the plan's communication measurements and read by the communication analysis."""

from __future__ import annotations

import math
from collections.abc import Iterable

from zerogate.contracts.base import Record


def is_persistent(numel: int, threshold: int) -> bool:
    """Whether ZeRO-3 keeps a parameter of ``numel`` elements whole on every rank, never fetched or released:
    at or below stage3_param_persistence_threshold (partition_parameters.py ``_convert_to_deepspeed_param``,
    ``ds_persist``)."""
    return numel <= threshold


class ModelCounts(Record):
    """Parameter counts of a model, with the shape numbers the activation terms need."""

    total: int  # unique parameters (tied weights once)
    largest_layer: int  # most parameters held directly by one module (DeepSpeed's "largest layer")
    numels: tuple[int, ...]  # each unique parameter's element count (ZeRO-3 partitions each one)
    hidden: int
    layers: int
    heads: int
    vocab: int
    tied_embeddings: bool
    # Most parameters in one decoder layer (a class in the model's ``_no_split_modules``): what ZeRO-3
    # gathers at once when that class is a leaf module (zero_optimization.leaf_module,
    # zerogate.render.cpu_tuning).
    largest_block: int = 0
    # Each unique parameter's size along its first dimension (FSDP2 shards and pads along it), and the
    # decoder layer it belongs to (its index among the ``_no_split_modules`` blocks, -1 outside them: the
    # root's), both in ``numels`` order; empty in counts written before they were recorded.
    first_dims: tuple[int, ...] = ()
    blocks: tuple[int, ...] = ()
    # Every module of the model (``model.modules()``, the root included: DeepSpeed's ZeRO-3 hooks each one,
    # parameter_offload.py ``_register_deepspeed_module``), and how many of them lie inside a decoder layer
    # (the layers themselves not counted): with the layer a ZeRO-3 leaf module, DeepSpeed does not recurse
    # into it, so those get no hooks. 0: counts written before they were recorded.
    modules: int = 0
    modules_in_blocks: int = 0

    def partition_numel(self, ranks: int) -> int:
        """Elements of one rank's ZeRO-3 partition: each parameter is padded to a multiple of ``ranks``."""
        return sum(math.ceil(n / ranks) for n in self.numels)

    def first_dim_padded_numel(self, ranks: int, indices: Iterable[int] | None = None) -> int:
        """Elements of these parameters (every one: None) each padded along its first dimension to a multiple
        of ``ranks``: what torch FSDP2 gathers of them (it shards dim 0); one rank holds 1/ranks of it."""
        if len(self.first_dims) != len(self.numels):
            raise ValueError(
                "the model's counts do not record each parameter's first dimension: count them again "
                "(zerogate.model.counts.count_parameters)"
            )
        chosen = range(len(self.numels)) if indices is None else indices
        return sum(
            math.ceil(self.first_dims[i] / ranks) * ranks * (self.numels[i] // self.first_dims[i])
            for i in chosen
        )

    def layer_units(self) -> list[list[int]]:
        """The parameters outside the decoder layers (FSDP2's root, when there are any), then each decoder
        layer's, as indices into ``numels``: the units torch FSDP2 shards as zerogate's engine wraps it."""
        root, layers = self.root_indices(), self.decoder_layers()
        return ([root] if root else []) + layers

    def root_indices(self) -> list[int]:
        """The parameters outside the decoder layers (embeddings, final norm, an untied head)."""
        return [i for i, block in enumerate(self._blocks()) if block == -1]

    def decoder_layers(self) -> list[list[int]]:
        """Each decoder layer's parameters, in layer order, as indices into ``numels``."""
        layers: dict[int, list[int]] = {}
        for index, block in enumerate(self._blocks()):
            if block != -1:
                layers.setdefault(block, []).append(index)
        return [layers[key] for key in sorted(layers)]

    def root_numel(self) -> int:
        """Elements outside the decoder layers."""
        return sum(self.numels[i] for i in self.root_indices())

    def first_dim_shard_numel(self, ranks: int) -> int:
        """Elements of one rank's FSDP2 shard of every parameter (first_dim_padded_numel / ranks)."""
        return self.first_dim_padded_numel(ranks) // ranks

    def _blocks(self) -> tuple[int, ...]:
        if len(self.blocks) != len(self.numels):
            raise ValueError(
                "the model's counts do not say which decoder layer each parameter is in: count them "
                "again (zerogate.model.counts.count_parameters)"
            )
        return self.blocks

    def persistent_numel(self, threshold: int) -> int:
        """Elements ZeRO-3 keeps whole on every rank (parameters at or below the persistence threshold)."""
        return sum(n for n in self.numels if is_persistent(n, threshold))

    def fetched_parameters(self, threshold: int) -> int:
        """Parameters ZeRO-3 fetches and releases around the modules that use them (the rest persistent)."""
        return sum(1 for n in self.numels if not is_persistent(n, threshold))
