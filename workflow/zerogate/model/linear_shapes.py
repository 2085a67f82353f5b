"""The matrix products of a model's linear layers: each layer's input and output widths, read from the model
built on the meta device (no weights), so any architecture transformers builds is covered and a 14B model
is read in seconds.

A layer is a ``torch.nn.Linear`` (``y = x W^T + b``, W: out x in) or transformers' ``Conv1D`` (GPT-2:
``y = x W + b``, W: in x out; transformers/pytorch_utils.py). Layers with the same widths are one
:class:`LinearShape`, counted (a bias adds no matrix product); the decoder layers' indices are folded into
``*`` in the names. The output head is a linear layer whether or not its weight is tied to the input
embedding: its product runs either way (``tied`` counts it, its weight then not a parameter of its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D

_INDEX = re.compile(r"\.\d+\.")


@dataclass(frozen=True)
class LinearShape:
    """Linear layers of one shape: ``count`` modules mapping ``in_features`` to ``out_features``."""

    in_features: int
    out_features: int
    count: int
    layers: tuple[str, ...]  # module names, decoder-layer indices folded into ``*``
    biases: int = 0  # how many of them have a bias
    tied: int = 0  # how many of them share their weight with another parameter (a tied output head)

    @property
    def weight_numel(self) -> int:
        return self.in_features * self.out_features


def _widths(module: Any) -> tuple[int, int] | None:
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, Conv1D):  # weight: in x out
        return int(module.weight.shape[0]), int(module.weight.shape[1])
    return None


def linear_shapes(config: Any) -> list[LinearShape]:
    """Every linear layer of ``config``'s causal LM, grouped by shape, in the order the model first
    has each shape."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    owner: dict[int, str] = {}  # parameter id -> the first module that holds it (tied weights)
    for name, module in model.named_modules():
        for parameter in module.parameters(recurse=False):
            owner.setdefault(id(parameter), name)
    groups: dict[tuple[int, int], dict[str, Any]] = {}
    for name, module in model.named_modules():
        widths = _widths(module)
        if widths is None:
            continue
        group = groups.setdefault(widths, {"count": 0, "layers": [], "biases": 0, "tied": 0})
        group["count"] += 1
        group["biases"] += module.bias is not None
        folded = _INDEX.sub(".*.", f".{name}.").strip(".")
        if folded not in group["layers"]:
            group["layers"].append(folded)
        group["tied"] += owner[id(module.weight)] != name
    return [
        LinearShape(
            in_features=i,
            out_features=o,
            count=g["count"],
            layers=tuple(g["layers"]),
            biases=g["biases"],
            tied=g["tied"],
        )
        for (i, o), g in groups.items()
    ]
