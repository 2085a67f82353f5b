"""The operators one micro-step dispatches beyond its products, counted by the planner's trace
(zerogate.predict.trace, under torch's fake tensors: every ATen op the model's forward with loss and its
backward run, recomputation included), torch-free so the time ledger can take them.

Each op is one of three kinds, by its name and its schema:

- ``product``: a matrix product (``mm``, ``addmm``, ``bmm``, ``baddbmm``), the linear layer's transpose of
  its weight (``t``) and SDPA's fused kernels: their time is the ledger's forward and backward terms (the
  products at the micro-benchmarks' rates, the attention's FLOP at them) and the per-module term (each
  linear module's own dispatch, timed on the synthetic stacks); not counted here;
- ``view``: an op whose output aliases its input (``OpOverload.is_view``: view, transpose, expand, slice,
  detach, ...; and ``_unsafe_view``, a view without autograd's view tracking): a dispatch and no memory
  traffic;
- ``computing``: every other op (elementwise, reductions, softmax, the loss, the embedding lookup and its
  backward, concatenations, fills): a dispatch and its memory traffic, the bytes of its tensor inputs and
  outputs, kept by the size of the op's largest tensor (elements): a byte costs the host more on a tensor
  beyond its caches (the logits) than on one within them (an activation), so the ledger prices each size
  at the cost the micro-benchmarks measured nearest it (zerogate.predict.step_time_operators).

Only ATen's ops count: the trace's dispatch mode also sees ``prim::device`` queries, which a plain eager run
answers without dispatching a kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PRODUCT_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "t"})
VIEW_OPS = frozenset({"_unsafe_view"})
# SDPA's fused kernels and their backwards (aten::_scaled_dot_product_flash_attention_for_cpu, ...).
PRODUCT_PREFIXES = ("_scaled_dot_product", "_flash_attention", "_efficient_attention")


def operator_kind(namespace: str, name: str, is_view: bool) -> str:
    """``product``, ``view`` or ``computing`` for the op ``namespace::name`` (its overload packet's name);
    ``other`` outside ATen."""
    if namespace != "aten":
        return "other"
    if name in PRODUCT_OPS or name.startswith(PRODUCT_PREFIXES):
        return "product"
    return "view" if is_view or name in VIEW_OPS else "computing"


@dataclass(frozen=True)
class OperatorTally:
    """One micro-step's operators beyond the products: ``computing`` ops and their traffic (each op's tensor
    inputs and outputs, bytes) by the elements of the op's largest tensor (``traffic_by_numel``), ``view``
    ops (aliases: no traffic). Floats: a trace scaled from fewer layers extrapolates them."""

    computing: float = 0.0
    views: float = 0.0
    traffic_by_numel: Mapping[int, float] = field(default_factory=dict)

    @property
    def traffic_bytes(self) -> float:
        """Every computing op's bytes, whatever its size."""
        return sum(self.traffic_by_numel.values())

    def added(
        self, namespace: str, name: str, is_view: bool, traffic_bytes: float, largest_numel: int
    ) -> OperatorTally:
        """This tally with one more op ``namespace::name`` moving ``traffic_bytes``, its largest tensor of
        ``largest_numel`` elements (products and ops outside ATen not counted)."""
        kind = operator_kind(namespace, name, is_view)
        if kind in ("product", "other"):
            return self
        if kind == "view":
            return OperatorTally(self.computing, self.views + 1, self.traffic_by_numel)
        traffic = dict(self.traffic_by_numel)
        if traffic_bytes > 0:
            traffic[largest_numel] = traffic.get(largest_numel, 0.0) + traffic_bytes
        return OperatorTally(self.computing + 1, self.views, traffic)

    def extrapolated(self, more: OperatorTally, extra: float) -> OperatorTally:
        """This tally (``fewer`` layers) carried ``extra`` layers further along the line to ``more`` (one
        layer or period more): each count, and each size's bytes, linear in the layer count, never below
        zero."""

        def line(a: float, b: float) -> float:
            return max(0.0, a + extra * (b - a))

        traffic = {
            numel: line(self.traffic_by_numel.get(numel, 0.0), more.traffic_by_numel.get(numel, 0.0))
            for numel in self.traffic_by_numel.keys() | more.traffic_by_numel.keys()
        }
        return OperatorTally(
            line(self.computing, more.computing),
            line(self.views, more.views),
            {numel: bytes_ for numel, bytes_ in traffic.items() if bytes_ > 0},
        )
