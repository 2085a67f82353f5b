"""The host time a rank spends blocked in torch.distributed collectives (:class:`CollectiveClock`): one
definition, used by the training loop's per-step records (zerogate.train.metrics, ``collectives(s)``) and by
the micro-benchmarks' synthetic stacks, whose collectives it takes out of their micro-step
(zerogate.runtime.module_overhead)."""

from __future__ import annotations

import functools
import time
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

# torch.distributed calls in which a rank can block on the others: a synchronous call blocks inside it, an
# asynchronous one (async_op=True, ZeRO-3's prefetched all-gathers) in its handle's wait().
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "barrier",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "send",
    "recv",
)


class CollectiveClock:
    """Host time this rank spends inside torch.distributed collectives, per optimizer step.

    Every collective DeepSpeed issues (through deepspeed.comm's torch backend) and the loop's own boundary
    all-reduce end in torch.distributed, so :meth:`install` wraps those functions -- before
    deepspeed.init_distributed, which keeps references to some of them. Each call costs two clock reads;
    nothing is synchronised that was not already: an asynchronous call is timed in its handle's wait(),
    where the rank would block anyway. Nested calls (a collective built from another) count once.

    What this time means is zerogate.analysis.measures' to say (compute, communication and wait per rank):
    on the CPU accelerator (gloo) a rank blocks in these calls until the transfer is done; on CUDA, NCCL
    calls return once the work is queued, so there it is the host's time, not the device's.
    """

    def __init__(self) -> None:
        self.blocked_s = 0.0
        self.calls = 0
        self._depth = 0
        self._wrappers: dict[int, Any] = {}

    def install(self, modules: tuple[Any, ...] | None = None) -> CollectiveClock:
        if modules is None:
            modules = (dist, distributed_c10d)
        for module in modules:
            for name in COLLECTIVES:
                function = getattr(module, name, None)
                if function is None or getattr(function, "__zerogate_clock__", None) is self:
                    continue
                if id(function) not in self._wrappers:  # one wrapper per function, in every namespace
                    self._wrappers[id(function)] = self._timed(function)
                setattr(module, name, self._wrappers[id(function)])
        return self

    def _timed(self, function: Any) -> Any:
        clock = self

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if clock._depth:
                return function(*args, **kwargs)
            clock._depth += 1
            started = time.perf_counter()
            try:
                result = function(*args, **kwargs)
            finally:
                clock._depth -= 1
                clock.blocked_s += time.perf_counter() - started
                clock.calls += 1
            return TimedWork(result, clock) if hasattr(result, "wait") else result

        timed.__zerogate_clock__ = clock  # type: ignore[attr-defined]
        return timed

    def take(self) -> tuple[float, int]:
        """Seconds blocked and calls since the last take; starts the next count."""
        taken = (self.blocked_s, self.calls)
        self.blocked_s, self.calls = 0.0, 0
        return taken


class TimedWork:
    """An asynchronous collective's handle whose wait() is timed on the clock; everything else passes
    through."""

    __slots__ = ("_work", "_clock")

    def __init__(self, work: Any, clock: CollectiveClock) -> None:
        self._work, self._clock = work, clock

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._clock.blocked_s += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)
