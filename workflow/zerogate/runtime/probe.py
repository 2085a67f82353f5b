"""Hardware and software fingerprint of the machine the pipeline runs on.

GPUs through NVML (nvidia-ml-py) and torch: name, total and free memory, compute capability, fp16/bf16,
PCIe generation and width (current and maximum), peer-to-peer and NVLink between each pair. The host:
CPU model, cores, NUMA nodes, RAM, /dev/shm, the locked-memory limit (pinned memory), a measured memory
bandwidth and fp32 matmul peak (the CPU floor's inputs), and versions of CUDA, NCCL, torch, DeepSpeed and
DeepSpeed's op compatibility report (with the reason of each incompatible op); collective latency and
bandwidth between two ranks (zerogate.predict.collectives: the floor's communication terms). The GPUs' facts
are read and parsed by zerogate.runtime.gpus.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import platform
import re
import resource
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import torch

from zerogate.contracts.machine import Fingerprint
from zerogate.runtime import collective_timing
from zerogate.runtime.gpus import cuda_devices, merge_devices, parse_nvml, read_nvml
from zerogate.units import GIB

PACKAGES = (
    "torch",
    "deepspeed",
    "transformers",
    "datasets",
    "snakemake",
    "tokenizers",
    "pandas",
    "seaborn",
    "nvidia-ml-py",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- GPUs: NVML values -> device facts (pure, tested on samples) -------------------------------------


# --- host ---------------------------------------------------------------------------------------------


def numa_nodes(root: str = "/sys/devices/system/node") -> int | None:
    nodes = [p for p in Path(root).glob("node[0-9]*")] if Path(root).is_dir() else []
    return len(nodes) or None


def pinned_memory_limit() -> int | None:
    """RLIMIT_MEMLOCK in bytes; None = unlimited. Pinned host buffers (offload pin_memory) count against
    it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        return int(shutil.disk_usage(path).total)
    except OSError:
        return None


def _best_rate(operation: Any, work: float, seconds: float) -> float:
    """The best ``work`` per second of ``operation`` over at least 3 runs and about ``seconds``."""
    best = 0.0
    deadline = time.perf_counter() + seconds
    for attempt in range(1000):
        if attempt >= 3 and time.perf_counter() > deadline:
            break
        started = time.perf_counter()
        operation()
        best = max(best, work / (time.perf_counter() - started))
    return best


def measure_host(seconds: float = 0.2) -> dict[str, float]:
    """Measured host peaks for the CPU floor: copy bandwidth (GB/s, read + write) and fp32 matmul (TFLOPS),
    all cores. Best of a few repeats; noisy on a shared machine, and only a lower bound on the true peak."""
    src = torch.ones(32 * 1024**2)  # 128 MiB: well beyond any last-level cache
    dst = torch.zeros_like(src)  # touched, so the timed copies do not include page faults
    best_bw = _best_rate(lambda: dst.copy_(src), 2 * src.numel() * 4, seconds) / 1e9  # read + write bytes
    a = torch.randn(1024, 1024)
    torch.mm(a, a)  # warm-up: thread pool and kernels
    best_flops = _best_rate(lambda: torch.mm(a, a), 2 * 1024**3, seconds) / 1e12
    return {"memory_bandwidth_gbps": round(best_bw, 2), "cpu_peak_tflops_fp32": round(best_flops, 4)}


def cpu_accelerator_facts() -> dict[str, Any]:
    """What DeepSpeed's CPU accelerator offers: fp16 depends on oneDNN support of this CPU."""
    try:
        fp16 = bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # older torch builds lack the op: DeepSpeed then treats fp16 as unsupported
        fp16 = False
    flags = ""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line for line in handle if line.startswith("flags")), "")
    except OSError:
        pass
    # Flags only: bf16 speed on a CPU must be measured (docs/reference.md section 5: ~20x slower than fp32
    # here).
    return {
        "fp16_supported": fp16,
        "avx512_bf16_flag": "avx512_bf16" in flags,
        "amx_bf16_flag": "amx_bf16" in flags,
    }


def runtime_versions() -> dict[str, Any]:
    """CUDA and NCCL as torch was built with them, and DeepSpeed's op compatibility (its ds_report)."""
    nccl = None
    try:
        if torch.cuda.is_available():
            version = torch.cuda.nccl.version()
            nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception:  # torch built without NCCL
        nccl = None
    return {"cuda": torch.version.cuda, "nccl": nccl, "deepspeed_ops": deepspeed_op_report()}


@contextlib.contextmanager
def captured_output() -> Iterator[Callable[[], str]]:
    """Everything written meanwhile, by Python (sys.stdout, sys.stderr) and by child processes (file
    descriptors 1 and 2), into one temporary file; yields a function returning the text so far.

    DeepSpeed's op checks compile and link test programs: with verbose=False it silences the compiler by
    redirecting ``sys.stderr.fileno()``, which misses the real stderr when sys.stderr has been replaced
    (a rule's log), so the linker's ``cannot find -laio`` reached the console."""
    with tempfile.TemporaryFile(mode="w+") as capture:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        try:
            for fd in saved:
                os.dup2(capture.fileno(), fd)
            with contextlib.redirect_stdout(capture), contextlib.redirect_stderr(capture):

                def text() -> str:
                    capture.flush()
                    capture.seek(0)
                    return capture.read()

                yield text
        finally:
            capture.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _warnings(text: str) -> str:
    """DeepSpeed's ``[WARNING]`` lines of ``text``, colour codes and prefix removed, in one line."""
    lines = [
        _ANSI.sub("", line).split("[WARNING]", 1)[1].strip()
        for line in text.splitlines()
        if "[WARNING]" in line
    ]
    return " ".join(line for line in lines if line)


def deepspeed_op_report() -> dict[str, Any] | None:
    """Per DeepSpeed op: compatible with this machine (the "compatible" column of ``ds_report``), and for
    each incompatible op DeepSpeed's reason (async_io: libaio's headers and library not found). The
    compilers' and linkers' output of the checks goes to this module's logger (the rule's log), never
    to the console."""
    try:
        # Here, not at the top: DeepSpeed's op builders may fail to load, and the report is then None.
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception:
        return None
    compatible: dict[str, bool] = {}
    reasons: dict[str, str] = {}
    with captured_output() as output:
        for name, builder in sorted(ALL_OPS.items()):
            try:
                compatible[name] = bool(builder.is_compatible(verbose=False))
            except Exception as error:
                compatible[name] = False
                reasons[name] = f"the compatibility check raised {type(error).__name__}: {error}"
        for name in sorted(n for n, ok in compatible.items() if not ok and n not in reasons):
            before = len(output())
            try:  # again, verbose: DeepSpeed then says why
                ALL_OPS[name].is_compatible(verbose=True)
            except Exception:
                pass
            reasons[name] = (
                _warnings(output()[before:]) or "DeepSpeed's compatibility check failed (no reason given)"
            )
        noise = output()
    if noise.strip():
        logging.getLogger(__name__).info(
            "DeepSpeed op compatibility checks (compiler and linker output):\n%s", noise
        )
    return {"compatible": compatible, "incompatible_reasons": reasons}


def collective_links(gpu_count: int) -> dict[str, Any]:
    """Collectives between two ranks as the run places them, timed
    (zerogate.runtime.collective_timing.measure): gloo between two local processes on the CPU accelerator,
    NCCL between GPUs 0 and 1. One GPU has no pair to measure."""
    if gpu_count == 1:
        return {
            "backend": "nccl",
            "world": 1,
            "samples": {},
            "skipped": "one GPU: no collective between ranks to measure",
        }
    return collective_timing.measure(world=2, backend="nccl" if gpu_count else "gloo")


def probe(measure: bool = True) -> dict[str, Any]:
    """The machine's facts in the fingerprint's shape (zerogate.contracts.machine.Fingerprint), the
    collectives as raw timings (``samples``: the planner derives their figures, zerogate.predict.collectives);
    ``measure=False`` leaves out what takes time (host peaks, collectives)."""
    memory = psutil.virtual_memory()
    nvml = parse_nvml(raw) if (raw := read_nvml()) else None
    gpus = merge_devices(cuda_devices(), nvml)
    # First, before measure_host starts torch's thread pool: the gloo ranks are forked from this process.
    links = collective_links(len(gpus)) if measure else None
    fingerprint: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": {
            "model": cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
            "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        },
        "ram": {"total_bytes": int(memory.total), "available_bytes": int(memory.available)},
        "host": {
            "numa_nodes": numa_nodes(),
            "shm_bytes": shm_bytes(),
            "pinned_memory_limit_bytes": pinned_memory_limit(),
            **(measure_host() if measure else {}),
        },
        "accelerator": {"kind": "cuda" if gpus else "cpu", "count": len(gpus), "devices": gpus},
        "links": (nvml or {}).get("links", {}),
        # Seconds per call of each collective kind between two ranks (the floor's communication terms).
        "collectives": links,
        "driver": None
        if nvml is None
        else {"version": nvml["driver_version"], "cuda": nvml["cuda_driver_version"]},
        "versions": {**package_versions(), **runtime_versions()},
    }
    if not gpus:
        fingerprint["accelerator"]["cpu"] = cpu_accelerator_facts()
    return fingerprint


def summary(fingerprint: Fingerprint) -> str:
    """A short human-readable line for logs and the report."""
    acc, cpu, host = fingerprint.accelerator, fingerprint.cpu, fingerprint.host
    ram = fingerprint.ram.total_bytes / GIB
    if acc.kind == "cuda":

        def link(d: Any) -> str:
            return f", PCIe {d.pcie.generation} x{d.pcie.width}" if d.pcie and d.pcie.generation else ""

        devices = ", ".join(f"{d.name} {d.memory_total_bytes / GIB:.1f} GiB{link(d)}" for d in acc.devices)
        p2p = fingerprint.links.peer_to_peer_all_pairs
        head = (
            f"{acc.count} CUDA device(s): {devices}; peer-to-peer "
            f"{'yes' if p2p else 'no' if p2p is False else 'n/a'}"
        )
    else:
        head = "no GPU (DeepSpeed CPU accelerator)"
    measured = (
        f"; measured copy {host.memory_bandwidth_gbps} GB/s, fp32 matmul {host.cpu_peak_tflops_fp32} TFLOPS"
        if host.memory_bandwidth_gbps
        else ""
    )
    collectives = fingerprint.collectives
    kinds = collectives.kinds if collectives else {}
    latency = [k.latency_s.value for k in kinds.values() if k.latency_s]
    bandwidth = [k.bandwidth_gbps.value for k in kinds.values() if k.bandwidth_gbps]
    comms = (
        f"; {collectives.backend} collectives between 2 ranks: latency >= {min(latency) * 1e3:.3g} ms"
        + (f", bandwidth <= {max(bandwidth):.3g} GB/s" if bandwidth else "")
        if collectives and latency
        else ""
    )
    return (
        f"{head}; CPU {cpu.model} ({cpu.logical_cores} logical cores, {host.numa_nodes} NUMA); "
        f"RAM {ram:.1f} GiB{measured}{comms}"
    )
