"""NVML process memory, sampled by a background thread: what the driver says this process holds on its
GPU, including the CUDA context and NCCL buffers that PyTorch's allocator does not see.

The sampler takes a ``query`` callable (bytes held now, or None), so its logic runs on a CPU with a fake;
``nvml_query`` builds the real one from pynvml (nvidia-ml-py), where installed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

Query = Callable[[], "int | None"]


def nvml_query(device_index: int, pid: int | None = None) -> Query | None:
    """A query for this process's memory on one GPU, or None where NVML is unavailable."""
    try:
        # Here, not at the top: nvidia-ml-py is present on most CUDA machines only, and not needed on CPUs.
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
    except Exception:  # no library, no driver, no device: memory is then simply not sampled
        return None
    pid = os.getpid() if pid is None else pid

    def query() -> int | None:
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and process.usedGpuMemory is not None:
                return int(process.usedGpuMemory)
        return None

    return query


class NvmlSampler:
    """Peak of ``query()`` per window, sampled every ``interval_s`` by a daemon thread."""

    def __init__(self, query: Query, interval_s: float = 0.05) -> None:
        self.query, self.interval_s = query, interval_s
        self._lock = threading.Lock()
        self._peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerogate-nvml", daemon=True)

    def start(self) -> NvmlSampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        value = self.query()
        if value is not None:
            with self._lock:
                self._peak = value if self._peak is None else max(self._peak, value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def take_peak(self) -> int | None:
        """The window's peak, and a new window starts. One sample now, so short windows are not empty."""
        self.sample()
        with self._lock:
            peak, self._peak = self._peak, None
        return peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)
