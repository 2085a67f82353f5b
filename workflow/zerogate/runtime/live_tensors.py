"""Live tensor bytes of this process and their peak, op by op: the CPU counterpart of
``torch.cuda.max_memory_allocated``.

A ``TorchDispatchMode`` sees the output of every op run under it; each output storage it has not seen is
added to the live bytes, and a ``weakref.finalize`` on the storage takes it off when it is freed (torch keeps
one Python object per storage for the storage's whole life, so the finalizer runs when the memory goes).
Storages that already exist when the count starts (the model's partitions, the optimizer's state, DeepSpeed's
flat buffers) are found among the tensors the garbage collector tracks and counted the same way, so the figure
is every tensor byte alive, not only what the counted region allocates.

torch's own ``torch.distributed._tools.mem_tracker.MemTracker`` counts the same way, but refuses a module
called twice inside one tracked region ("does not support memory tracking for multiple iterative calls"):
an optimizer step with gradient accumulation runs every module once per micro-batch, so it cannot count one.

A tensor subclass that wraps others (torch's DTensor, FSDP2's sharded parameters and their optimizer states)
holds no memory of its own: its inner tensors do. Its ops are handed back to it (``NotImplemented``) so they
reach the mode as the plain ops on its inner tensors, and the garbage collector's wrappers are skipped, their
inner tensors being counted on their own. A storage resized in place (``UntypedStorage.resize_``: FSDP2 frees
an unsharded parameter after use and allocates it again so) counts its new size from then on.

Each storage is also counted in one of two size classes, the C allocator's (zerogate.runtime.heap): ``heap``
(at most GLIBC_MMAP_THRESHOLD_MAX_BYTES: glibc keeps such a storage's pages resident after it is freed) and
``mapped`` (above it: unmapped when freed), each with its own peak.

Not counted: memory that never becomes a tensor storage (the C allocator's own, a C++ extension's buffers, the
shm comm workspace) and tensors held only inside C++ when the count starts (none between two optimizer
steps: autograd's saved tensors are gone by then). Each storage counts its ``nbytes()`` whether or not its
pages were written, as the CUDA allocator counts a ``torch.empty``.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    is_traceable_wrapper_subclass,
    is_traceable_wrapper_subclass_type,
)
from torch.utils._pytree import tree_leaves

from zerogate.runtime.heap import size_class_of


def storage_key(storage: Any) -> Any:
    return StorageWeakRef(storage)


def live_storages(device_type: str = "cpu") -> list[Any]:
    """The storages of every tensor the garbage collector tracks now, on ``device_type``, each once."""
    found: dict[Any, Any] = {}
    with (
        warnings.catch_warnings()
    ):  # isinstance on deprecated module attributes warns (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [obj for obj in objects if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        if is_traceable_wrapper_subclass(obj):  # its inner tensors hold its memory and are counted themselves
            continue
        try:
            if obj.device.type != device_type or obj.is_meta:
                continue
            storage = obj.untyped_storage()
        except (RuntimeError, NotImplementedError, ReferenceError):  # wrapper subclasses, freed weak proxies
            continue
        found.setdefault(storage_key(storage), storage)
    return list(found.values())


class LiveCount:
    """Bytes alive now and their peak, overall and in each of the C allocator's size classes (the module
    docstring), as storages are counted and uncounted by a key: what :class:`LiveBytes` counts op by op, and
    what zerogate.predict.trace_log reads back from a trace's events."""

    def __init__(self) -> None:
        self._sizes: dict = {}
        self.now = 0
        self.peak = 0
        self.class_now = {"heap": 0, "mapped": 0}
        self.class_peak = {"heap": 0, "mapped": 0}

    def count(self, ref: Any, nbytes: int) -> None:
        """Count a storage of ``nbytes`` under ``ref``."""
        self._sizes[ref] = nbytes
        self.now += nbytes
        self.peak = max(self.peak, self.now)
        size_class = size_class_of(nbytes)
        self.class_now[size_class] += nbytes
        self.class_peak[size_class] = max(self.class_peak[size_class], self.class_now[size_class])

    def uncount(self, ref: Any) -> None:
        """Take the storage counted under ``ref`` off (nothing if it is not counted)."""
        nbytes = self._sizes.pop(ref, 0)
        self.now -= nbytes
        self.class_now[size_class_of(nbytes)] -= nbytes

    def restart_peak(self) -> int:
        """Start a new peak (and a new peak of each size class) from the bytes alive now, and return
        them."""
        self.peak = self.now
        self.class_peak = dict(self.class_now)
        return self.now


class LiveBytes(LiveCount, TorchDispatchMode):
    """Bytes of the storages alive now (``excluded`` left out) and their peak, op by op (:class:`LiveCount`).

    ``seed``: storages alive before the mode starts, counted from the start (live_storages()).
    Subclasses may look at each op in :meth:`saw`."""

    def __init__(self, excluded: set | None = None, seed: list | None = None) -> None:
        LiveCount.__init__(self)
        TorchDispatchMode.__init__(self)
        self._excluded = excluded or set()
        for storage in seed or []:
            self.track(storage)
        self.start = self.now

    def saw(self, func: Any) -> None:
        """Called with every op before it runs."""

    def __enter__(self) -> Any:
        # Every in-place resize of a storage while counting goes through resized().
        self._resize = torch.UntypedStorage.resize_
        mode = self

        def resize(storage: Any, size: int) -> Any:
            result = mode._resize(storage, size)
            mode.resized(storage)
            return result

        torch.UntypedStorage.resize_ = resize
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(is_traceable_wrapper_subclass_type(t) for t in types):
            return NotImplemented  # a wrapper subclass: it runs the op as plain ops on its inner tensors
        self.saw(func)
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, Tensor):
                self.track(leaf.untyped_storage())
        return out

    def track(self, storage: Any) -> None:
        ref = StorageWeakRef(storage)
        if ref in self._excluded or ref in self._sizes:
            return
        self.count(ref, storage.nbytes())
        weakref.finalize(storage, self._release, ref)

    def resized(self, storage: Any) -> None:
        """A storage resized in place: counted at its new size (tracked from now if it was not)."""
        ref = StorageWeakRef(storage)
        if ref in self._excluded:
            return
        if ref not in self._sizes:
            self.track(storage)
            return
        self.uncount(ref)
        self.count(ref, storage.nbytes())

    def _release(self, ref: Any) -> None:
        self.uncount(ref)


def live_bytes_class() -> type[LiveBytes]:
    """The LiveBytes mode (zerogate.predict.trace counts the planner's trace with a subclass of it)."""
    return LiveBytes


def counting_live_bytes(excluded: set | None = None, seed: list | None = None) -> Any:
    """A LiveBytes mode (``with counting_live_bytes(seed=live_storages()) as live: ...``; ``live.peak``)."""
    return LiveBytes(excluded, seed)
