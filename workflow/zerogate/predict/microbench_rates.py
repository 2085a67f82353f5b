"""The micro-benchmarks' contract (zerogate.contracts.microbench.Microbench) as the rates a time ledger
multiplies its work by: :func:`rates_from_microbench`.

Each rate is a :class:`Rate`, the median with a low and a high end taken from the slowest and the fastest of
its repeats (:func:`ends`), so a ledger built on them carries the spread the measurement showed: the middle
half of five repeats (their quartiles) left out as much as a rate's median moved between two runs of the
micro-benchmarks on a quiet machine (8-14 %, docs/measurements.md). Aggregates over several matrix products
weigh each product by the time it takes, not by its rate: the linear layers' forward rate is their forward
FLOP divided by the sum of each product's seconds (``count`` x ``seconds_per_call``), which is the rate at
which the model's linear layers really run. No torch: the planner imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from zerogate.contracts.machine import Collectives
from zerogate.contracts.microbench import (
    OPS_PER_LINK,
    CopyRate,
    MatmulRate,
    Microbench,
    ModuleOverhead,
    OperatorChain,
    OptimizerRate,
    Spread,
)

FORWARD = ("forward",)
BACKWARD = ("backward_input", "backward_weight")


@dataclass(frozen=True)
class Rate:
    """A measured rate or time: the median, and the ends its repeats give (:func:`ends`; ``low`` <=
    ``median`` <= ``high``, in ``unit``), with what it was measured on (``source``)."""

    median: float
    low: float
    high: float
    unit: str
    source: str


def slope(points: dict[int, tuple[float, float]], end: int) -> float:
    """The slope, never below zero, of the line through two timed sizes (size -> (fastest, slowest repeat)
    seconds) at one end of their repeats (0 fastest, 1 slowest): the cost of one more unit of size (a module
    of a synthetic stack, a link of an operator chain)."""
    (n1, t1), (n2, t2) = sorted(points.items())
    return max(0.0, (t2[end] - t1[end]) / (n2 - n1))


@dataclass(frozen=True)
class ParameterStack:
    """The largest synthetic stack timed again with two parameters a module (the weight and a bias):
    ``modules`` modules, (fastest, slowest repeat) seconds per micro-step through the engine and eagerly."""

    modules: int
    engine: tuple[float, float]
    eager: tuple[float, float]


@dataclass(frozen=True)
class ModuleLines:
    """Seconds per micro-step of the synthetic module stacks against their size (Microbench
    ``module_overhead``): through the run's DeepSpeed engine (``engine``: its size -> (fastest, slowest
    repeat) seconds) and eagerly (``eager``), at two sizes each of one parameter a module, with what was
    measured (``source``). The lines through the two sizes give a fixed cost per micro-step and a cost per
    module of one parameter; the larger stack timed with two parameters a module (``two_parameters``; None:
    not timed) gives the cost of each parameter beyond a module's first, through the engine and eagerly."""

    stage: int
    engine: dict[int, tuple[float, float]]
    eager: dict[int, tuple[float, float]]
    source: str
    two_parameters: ParameterStack | None = None

    def _at(self, points: dict[int, tuple[float, float]], modules: int, end: int) -> float:
        n1, t1 = min(points.items())
        return max(0.0, t1[end] + (modules - n1) * slope(points, end))

    def _per_parameter(self, engine: bool, end: int) -> float:
        """Seconds per parameter beyond a module's first, never below zero (0 where not timed): the two-
        parameter stack less the one-parameter stack of the same size, over its modules, at one end."""
        stack = self.two_parameters
        if stack is None:
            return 0.0
        one = (self.engine if engine else self.eager)[stack.modules]
        two = stack.engine if engine else stack.eager
        return max(0.0, (two[end] - one[end]) / stack.modules)

    def seconds(self, hooked: int, modules: int, parameters: tuple[int, int]) -> tuple[float, float]:
        """(low, high) seconds of one micro-step's per-module and per-parameter cost for a model of
        ``modules`` modules of which ``hooked`` go through the engine's hooks, and whose parameters go
        through the engine's per-parameter work (``parameters``: at the fast end, at the slow end): the
        engine's line at ``hooked`` (its fixed cost included, one parameter a module), the engine's cost per
        parameter for each parameter more than ``hooked`` (fewer: less), and for the other modules the eager
        cost per module without its parameter (their parameters are the engine's). One end from the lines
        through the fastest repeats and one from those through the slowest (lines that cross give them the
        other way round: sorted)."""
        ends = []
        for end in (0, 1):
            engine = self._at(self.engine, hooked, end) + (parameters[end] - hooked) * self._per_parameter(
                True, end
            )
            eager = max(0.0, slope(self.eager, end) - self._per_parameter(False, end))
            ends.append(max(0.0, engine + (modules - hooked) * eager))
        low, high = sorted(ends)
        return low, high

    def per_module(self) -> tuple[float, float]:
        """(low, high) seconds per module of one parameter and micro-step through the engine (the lines'
        slopes, sorted)."""
        low, high = sorted((slope(self.engine, 0), slope(self.engine, 1)))
        return low, high

    def per_parameter(self) -> tuple[float, float] | None:
        """(low, high) seconds per parameter beyond a module's first and micro-step through the engine
        (sorted; None where the two-parameter stack was not timed)."""
        if self.two_parameters is None:
            return None
        low, high = sorted((self._per_parameter(True, 0), self._per_parameter(True, 1)))
        return low, high


@dataclass(frozen=True)
class OperatorLines:
    """The host's cost of a dispatched computing op with autograd (``dispatch_s``, seconds per op) and of its
    memory traffic at each size timed (``per_byte_s``: elements of the chain's tensor, and seconds per byte
    of an op's tensor inputs and outputs), each (low, high), from the operator chains (Microbench
    ``operator_chains``, zerogate.runtime.operator_dispatch): the slope per op of the chain on a few
    elements, and each larger chain's extra slope over the bytes each of its ops moves more; low from the
    repeats' fastest ends, high from their slowest."""

    dispatch_s: tuple[float, float]
    per_byte_s: dict[int, tuple[float, float]]
    source: str

    def traffic_s(self, traffic_by_numel: Mapping[int, float]) -> tuple[float, float]:
        """Seconds (low, high) of the bytes of ops whose largest tensor has each number of elements: at the
        cost timed at that size where the size was timed, or lies below the smallest (the smallest's) or
        above the largest (the largest's); between two sizes timed, anywhere between their costs."""
        sizes = sorted(self.per_byte_s)
        low = high = 0.0
        for numel, traffic in traffic_by_numel.items():
            below = [s for s in sizes if s <= numel] or sizes[:1]
            above = [s for s in sizes if s >= numel] or sizes[-1:]
            near = (self.per_byte_s[below[-1]], self.per_byte_s[above[0]])
            low += traffic * min(cost[0] for cost in near)
            high += traffic * max(cost[1] for cost in near)
        return low, high


@dataclass(frozen=True)
class MeasuredRates:
    """What the time ledger needs of this machine, from the micro-benchmarks alone.

    - ``forward_flop_per_s``, ``backward_flop_per_s``: the linear layers' products of one micro-step, FLOP
      over time (flop/s); ``linear_forward_s``, ``linear_backward_s``: those products' seconds per
      micro-step and rank (s), the backward's two products per layer together.
    - ``copies``: payload bytes per second (bytes/s) by :func:`copy_key` (``host_to_host``,
      ``host_to_device_pinned``, ``host_to_device_pageable``, ``device_to_host_pinned``, ...), only the
      routes measured (no device: host to host only).
    - ``cpu_update_param_per_s``: the optimizer update on the host (param/s: DeepSpeed's CPU Adam, or
      torch's AdamW where its op does not load; ``source`` says which), over one rank's partition;
      ``device_update_param_per_s``: torch's fused AdamW on the device (None without one).
    - ``collectives``: the probe's figures between two ranks (latency and bandwidth per kind), as measured.
    - ``module_lines``: the per-module and per-parameter cost of a micro-step on the host (None: not
      measured).
    - ``operator_lines``: the cost of a dispatched operator and of its memory traffic on the host (None: not
      measured).
    - ``cpu_share``: the measuring process's CPU seconds over wall seconds x ``threads`` (None: not
      recorded); well below 1, other processes shared its cores and the rates are lower than the machine's.
    """

    forward_flop_per_s: Rate
    backward_flop_per_s: Rate
    linear_forward_s: Rate
    linear_backward_s: Rate
    copies: dict[str, Rate]
    cpu_update_param_per_s: Rate | None
    device_update_param_per_s: Rate | None
    collectives: Collectives | None
    threads: int
    dtype: str
    cpu_share: float | None = None
    accelerator: str = "cpu"
    module_lines: ModuleLines | None = None
    operator_lines: OperatorLines | None = None

    def copy(self, route: str, pinned: bool | None) -> Rate | None:
        """The rate of a copy in ``route``'s direction (``host_to_device``, ``device_to_host``,
        ``host_to_host``), page-locked or not (None where nothing was timed for it). On DeepSpeed's CPU
        accelerator the device is host memory (its offload copies one host buffer into another), so
        both directions are the host-to-host copy, pinned or not."""
        if self.accelerator == "cpu":
            return self.copies.get("host_to_host")
        return self.copies.get(copy_key(route, None if route == "host_to_host" else pinned))


def copy_key(route: str, pinned: bool | None) -> str:
    """The key of a copy's rate in ``MeasuredRates.copies``: the route, then ``_pinned`` or ``_pageable``
    for a copy to or from a device."""
    return route if pinned is None else f"{route}_{'pinned' if pinned else 'pageable'}"


# How a measured rate's interval is taken (:func:`ends`), as the ledger's sources say it.
REPEAT_RANGE = "fastest to slowest repeat"


def ends(spread: Spread) -> tuple[float, float]:
    """(low, high) of a measured spread: its smallest and largest repeat, each a measurement of the same
    quantity on this machine."""
    return min(spread.samples), max(spread.samples)


def _rate(spread: Spread, unit: str, source: str) -> Rate:
    low, high = ends(spread)
    return Rate(median=spread.median, low=low, high=high, unit=unit, source=source)


def _products(matmuls: list[MatmulRate], kinds: tuple[str, ...], where: str) -> tuple[Rate, Rate]:
    """(flop/s, seconds per micro-step) of the products of ``kinds``: total FLOP over total time, each
    end of the interval from the products' slowest or fastest repeats (:func:`ends`)."""
    chosen = [m for m in matmuls if m.kind in kinds]
    if not chosen:
        raise ValueError(f"the micro-benchmarks hold no {'/'.join(kinds)} matrix product")
    flop = sum(m.count * m.flop_per_call for m in chosen)

    def seconds(rate_of: Callable[[Spread], float]) -> float:
        return sum(m.count * m.flop_per_call / rate_of(m.rate) for m in chosen)

    fast = seconds(lambda spread: ends(spread)[1])
    median = seconds(lambda spread: spread.median)
    slow = seconds(lambda spread: ends(spread)[0])
    source = f"{where}: {len(chosen)} {'/'.join(kinds)} products at the run's linear layers' shapes"
    return (
        Rate(median=flop / median, low=flop / slow, high=flop / fast, unit="flop/s", source=source),
        Rate(median=median, low=fast, high=slow, unit="s", source=source),
    )


def _update(rows: list[OptimizerRate], device: str, where: str) -> Rate | None:
    row = next((r for r in rows if r.device == device), None)
    if row is None:
        return None
    source = (
        f"{where}: {row.implementation} over {row.parameters} parameters, {row.threads} thread(s) ({row.why})"
    )
    return _rate(row.rate, "param/s", source)


def _copies(rows: list[CopyRate], where: str) -> dict[str, Rate]:
    return {
        copy_key(r.route, r.pinned): _rate(r.rate, "bytes/s", f"{where}: {r.size_bytes} B copies")
        for r in rows
    }


def _engine_world(rows: list[ModuleOverhead]) -> str:
    """Where the stacks' engines ran: a world of one rank, or of the run's ranks on the host with their
    collectives' time taken out (zerogate.runtime.module_overhead)."""
    world = max(r.world for r in rows if r.engine == "deepspeed")
    if world == 1:
        return "in a one-rank world"
    return f"in a world of {world} ranks, the time blocked in its collectives taken out"


def _module_lines(rows: list[ModuleOverhead], where: str) -> ModuleLines | None:
    """The stacks' lines, where both engines were timed at two sizes of one parameter a module (None
    otherwise), with the two-parameter stack where both engines timed it at one of those sizes."""
    one: dict[str, dict[int, tuple[float, float]]] = {"deepspeed": {}, "eager": {}}
    two: dict[str, dict[int, tuple[float, float]]] = {"deepspeed": {}, "eager": {}}
    for row in rows:
        (one if row.parameters_per_module == 1 else two)[row.engine][row.modules] = ends(row.time)
    if any(len(points) != 2 for points in one.values()):
        return None
    stage = next(r.stage for r in rows if r.engine == "deepspeed")
    first = rows[0]
    sizes = set(two["deepspeed"]) & set(two["eager"]) & set(one["deepspeed"]) & set(one["eager"])
    stack = None
    if sizes:
        modules = max(sizes)
        stack = ParameterStack(modules, two["deepspeed"][modules], two["eager"][modules])
    source = (
        f"{where}: synthetic stacks of {' and '.join(map(str, sorted(one['deepspeed'])))} "
        f"{first.width} x {first.width} linear layers"
        + (f" (and of {stack.modules} with a bias each)" if stack else "")
        + f" on {first.rows} rows, a micro-step each through a ZeRO-{stage} engine from the run's config "
        f"{_engine_world(rows)} and eagerly ({REPEAT_RANGE})"
    )
    return ModuleLines(
        stage=stage, engine=one["deepspeed"], eager=one["eager"], source=source, two_parameters=stack
    )


def _operator_lines(rows: list[OperatorChain], where: str) -> OperatorLines | None:
    """The operator chains' costs (OperatorLines), where two lengths were timed at each of two sizes or
    more (None otherwise): the smallest size's for the dispatch, each larger one's for its bytes."""
    by_size: dict[int, dict[int, tuple[float, float]]] = {}
    for row in rows:
        by_size.setdefault(row.numel, {})[row.links] = ends(row.time)
    if len(by_size) < 2 or any(len(points) != 2 for points in by_size.values()):
        return None
    small, *larger = sorted(by_size)
    element_bytes = rows[0].element_bytes

    def per_op(points: dict[int, tuple[float, float]], end: int) -> float:
        return slope(points, end) / OPS_PER_LINK

    def per_byte(numel: int) -> tuple[float, float]:
        # Each op of a chain reads its numel elements and writes as many (zerogate.runtime.operator_dispatch).
        extra_bytes = 2 * (numel - small) * element_bytes
        extra = [max(0.0, per_op(by_size[numel], end) - per_op(by_size[small], end)) for end in (0, 1)]
        low, high = sorted(seconds / extra_bytes for seconds in extra)
        return low, high

    dispatch = sorted(per_op(by_size[small], end) for end in (0, 1))
    chains = "; ".join(
        f"{' and '.join(map(str, sorted(by_size[numel])))} links on {numel}" for numel in (small, *larger)
    )
    source = (
        f"{where}: chains of elementwise products and their backward ({OPS_PER_LINK} ATen ops a link), "
        f"{chains} elements of {element_bytes} B ({REPEAT_RANGE})"
    )
    return OperatorLines(
        dispatch_s=(dispatch[0], dispatch[1]),
        per_byte_s={numel: per_byte(numel) for numel in larger},
        source=source,
    )


def rates_from_microbench(bench: Microbench, where: str = "plan/microbench.json") -> MeasuredRates:
    """The rates a time ledger needs, from the micro-benchmarks' file (``where`` names it in each rate's
    source, with how many processes timed it at once). ValueError when the file holds no forward or no
    backward product."""
    if bench.ranks_at_once > 1:
        where = f"{where}, timed by {bench.ranks_at_once} processes at once as the run's ranks on the host"
    forward, forward_s = _products(bench.matmuls, FORWARD, where)
    backward, backward_s = _products(bench.matmuls, BACKWARD, where)
    return MeasuredRates(
        forward_flop_per_s=forward,
        backward_flop_per_s=backward,
        linear_forward_s=forward_s,
        linear_backward_s=backward_s,
        copies=_copies(bench.copies, where),
        cpu_update_param_per_s=_update(bench.optimizer, "cpu", where),
        device_update_param_per_s=_update(bench.optimizer, "cuda", where),
        collectives=bench.collectives,
        threads=bench.threads,
        dtype=bench.dtype,
        cpu_share=bench.cpu_share,
        accelerator=bench.accelerator,
        module_lines=_module_lines(bench.module_overhead, where),
        operator_lines=_operator_lines(bench.operator_chains, where),
    )
