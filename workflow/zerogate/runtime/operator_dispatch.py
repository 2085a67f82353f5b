"""The host's cost of one dispatched operator with autograd, timed on a synthetic chain (no model of the run
is built): ``links`` elementwise products by a scalar on a tensor of ``numel`` elements, then the backward
through them.

Each link dispatches one ATen op in the forward (``aten::mul``) and one in the backward (its
``MulBackward0`` node's ``aten::mul``), with autograd's node bookkeeping around each; the chain's sum, its
backward and the gradient's accumulation are the same at every length. So the line through two chain lengths
has a slope of :data:`OPS_PER_LINK` ops per link, and its slope over them is the cost of one dispatched
computing op with its share of autograd's work. Each of those ops reads ``numel`` elements and writes as many,
so on a tensor of a few elements the slope is the dispatch alone, and on one of the run's activation size
(micro-batch x sequence x hidden) it adds the memory traffic at that size, caches included: two chains give
a cost per op and a cost per byte moved. The planner's trace counts the ops a micro-step dispatches and their
bytes (zerogate.predict.operator_tally); the time ledger multiplies the two
(zerogate.predict.step_time_operators).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from zerogate.contracts.microbench import OPS_PER_LINK, Spread
from zerogate.runtime.module_overhead import seconds_spread

__all__ = ["OPS_PER_LINK", "chain_step", "time_chain"]


def chain_step(links: int, numel: int, dtype: torch.dtype = torch.float32) -> Callable[[], Any]:
    """One forward through ``links`` scalar products of a ``numel``-element tensor and its backward."""
    torch.manual_seed(0)
    x = torch.randn(numel, dtype=dtype).requires_grad_()

    def step() -> None:
        y = x
        for _ in range(links):
            y = y * 1.0001
        y.sum().backward()
        x.grad = None

    return step


def time_chain(links: int, numel: int, dtype: torch.dtype, budget_s: float) -> Spread:
    """Seconds per forward and backward of a chain of ``links`` links, over the repeats."""
    return seconds_spread(chain_step(links, numel, dtype), budget_s)
