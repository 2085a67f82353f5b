"""Hardware and software fingerprint of the machine the pipeline runs on."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

import psutil

PACKAGES = ("torch", "deepspeed", "transformers", "datasets", "snakemake", "tokenizers", "pandas", "seaborn")
GIB = 1024**3


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


def cuda_devices() -> list[dict[str, Any]]:
    """Each visible CUDA device as torch sees it (empty on a machine without GPUs)."""
    import torch

    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {
                "index": index,
                "name": props.name,
                "memory_total_bytes": int(props.total_memory),
                "compute_capability": f"{props.major}.{props.minor}",
                "bf16_supported": bool(props.major >= 8),
                "fp16_supported": True,
            }
        )
    return devices


def cpu_accelerator_facts() -> dict[str, Any]:
    """What DeepSpeed's CPU accelerator offers: fp16 depends on oneDNN support of this CPU."""
    import torch

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
    # Flags only: bf16 speed on a CPU must be measured (reference.md section 5: ~20x slower than fp32 here).
    return {"fp16_supported": fp16, "avx512_bf16_flag": "avx512_bf16" in flags, "amx_bf16_flag": "amx_bf16" in flags}


def probe() -> dict[str, Any]:
    """The machine fingerprint written by the ``probe_hardware`` rule."""
    memory = psutil.virtual_memory()
    gpus = cuda_devices()
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
        "accelerator": {"kind": "cuda" if gpus else "cpu", "count": len(gpus), "devices": gpus},
        "versions": package_versions(),
    }
    if not gpus:
        fingerprint["accelerator"]["cpu"] = cpu_accelerator_facts()
    return fingerprint


def summary(fingerprint: dict[str, Any]) -> str:
    """A short human-readable line for logs and the report."""
    acc = fingerprint["accelerator"]
    cpu = fingerprint["cpu"]
    ram = fingerprint["ram"]["total_bytes"] / GIB
    if acc["kind"] == "cuda":
        devices = ", ".join(f"{d['name']} {d['memory_total_bytes'] / GIB:.1f} GiB" for d in acc["devices"])
        head = f"{acc['count']} CUDA device(s): {devices}"
    else:
        head = "no GPU (DeepSpeed CPU accelerator)"
    return f"{head}; CPU {cpu['model']} ({cpu['logical_cores']} logical cores); RAM {ram:.1f} GiB"
