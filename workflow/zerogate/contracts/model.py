"""A model's parameter counts as the planner counts them (zerogate.model.counts.count_parameters), carried
by the plan's communication measurements and read by the communication analysis."""

from __future__ import annotations

import math

from zerogate.contracts.base import Record


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
    # gathers at once when that class is a leaf module (zero_optimization.leaf_module, zerogate.plan.cpu_tuning).
    largest_block: int = 0

    def partition_numel(self, ranks: int) -> int:
        """Elements of one rank's ZeRO-3 partition: each parameter is padded to a multiple of ``ranks``."""
        return sum(math.ceil(n / ranks) for n in self.numels)

    def persistent_numel(self, threshold: int) -> int:
        """Elements ZeRO-3 keeps whole on every rank (parameters at or below the persistence threshold)."""
        return sum(n for n in self.numels if n <= threshold)
