"""Hand freed host memory back to the operating system (glibc's malloc_trim).

Loading a model builds it whole on every rank (a GGUF is dequantised, a checkpoint is read into full
tensors) before DeepSpeed partitions it; the full tensors are then freed, but glibc keeps freed heap
pages mapped and resident for reuse. On the CPU accelerator that garbage counts in the rank's resident
set, and so in its measured peak, although nothing holds it: measured on cpu-smollm2, about 1.1 GiB per
rank. Trimming once after the engine is built, and between the communication worker's
schemes, makes the resident set what the rank holds, which is what the peak prediction counts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import lru_cache

# glibc's malloc (malloc/malloc.c): a request at or above the mmap threshold is mapped on its own and unmapped
# when freed; a smaller one comes from the heap, whose freed pages stay resident for reuse (only a free top
# above the trim threshold goes back). The threshold starts at 128 KiB and, whenever a mapped chunk is freed,
# rises to that chunk's size, up to DEFAULT_MMAP_THRESHOLD_MAX (4 MiB x sizeof(long): 32 MiB on 64-bit
# Linux). So once a run has freed its first tensors, a tensor storage of at most this size lives on the heap
# and one above it is mapped: the size classes zerogate.runtime.live_tensors counts apart.
GLIBC_MMAP_THRESHOLD_MAX_BYTES = 32 * 1024 * 1024


def size_class_of(nbytes: int) -> str:
    """The C allocator's size class of a storage of ``nbytes``: ``heap`` (at most
    GLIBC_MMAP_THRESHOLD_MAX_BYTES: its pages stay resident after it is freed) or ``mapped`` (above it:
    unmapped when freed)."""
    return "heap" if nbytes <= GLIBC_MMAP_THRESHOLD_MAX_BYTES else "mapped"


class _Mallinfo2(ctypes.Structure):
    # glibc >= 2.33, malloc.h: struct mallinfo2, every field a size_t.
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim"):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


def release_freed_memory() -> bool:
    """Collect Python's garbage, then return glibc's free heap pages to the OS. False where the C library
    has no malloc_trim (musl, macOS): nothing is trimmed there, and the resident set keeps what it kept."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def allocator_free_bytes() -> int | None:
    """Bytes glibc's allocator holds free in its arenas (mallinfo2's fordblks, every arena): memory the
    process freed and the allocator kept for reuse. Part of it is resident (pages written before they were
    freed and not trimmed since), so it is the upper bound of the resident set nothing holds. None where
    the C library has no mallinfo2."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    return int(libc.mallinfo2().fordblks)
