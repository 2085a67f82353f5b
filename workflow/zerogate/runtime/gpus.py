"""The machine's GPUs: NVML's values (nvidia-ml-py) or ``nvidia-smi -q -x``'s XML parsed into device facts
and pairwise links (pure functions, tested on hand-made samples: the GPU path has not yet run on a GPU), and
torch's view of each CUDA device, completed with NVML's PCIe and free memory."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import torch

from zerogate.units import MIB


def parse_nvml(raw: dict[str, Any]) -> dict[str, Any]:
    """Device facts and pairwise links from the plain values :func:`read_nvml` collects.

    ``raw``: {"driver_version", "cuda_driver_version" (int, e.g. 12040), "devices": [{"name", "memory_total",
    "memory_free" (bytes), "cuda_compute_capability" ((major, minor)), "pcie_gen", "pcie_width",
    "pcie_max_gen", "pcie_max_width", "nvlink_active" (int)}], "p2p": {"i,j": status}} with NVML's
    status 0 = NVML_P2P_STATUS_OK.
    """
    devices = []
    for index, d in enumerate(raw.get("devices", [])):
        major, minor = d.get("cuda_compute_capability") or (None, None)
        devices.append(
            {
                "index": index,
                "name": d["name"].decode() if isinstance(d["name"], bytes) else d["name"],
                "memory_total_bytes": int(d["memory_total"]),
                "memory_free_bytes": None if d.get("memory_free") is None else int(d["memory_free"]),
                "compute_capability": None if major is None else f"{major}.{minor}",
                # fp16 arithmetic from sm_53, bf16 from Ampere (sm_80), per the CUDA programming guide.
                "fp16_supported": major is not None and (major, minor) >= (5, 3),
                "bf16_supported": major is not None and major >= 8,
                "pcie": {
                    "generation": d.get("pcie_gen"),
                    "width": d.get("pcie_width"),
                    "max_generation": d.get("pcie_max_gen"),
                    "max_width": d.get("pcie_max_width"),
                },
                "nvlink_active_links": d.get("nvlink_active", 0),
            }
        )
    pairs = []
    for key, status in sorted(raw.get("p2p", {}).items()):
        i, j = (int(x) for x in key.split(","))
        pairs.append({"a": i, "b": j, "peer_to_peer": status == 0})
    cuda = raw.get("cuda_driver_version")
    return {
        "driver_version": raw.get("driver_version"),
        "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
        "devices": devices,
        "links": {
            "pairs": pairs,
            "peer_to_peer_all_pairs": None if not pairs else all(p["peer_to_peer"] for p in pairs),
            "nvlink_any": any(d["nvlink_active_links"] for d in devices),
        },
    }


def _int_or_none(text: str | None) -> int | None:
    digits = "".join(ch for ch in (text or "") if ch.isdigit())
    return int(digits) if digits else None


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """The same facts from ``nvidia-smi -q -x`` (a fallback where NVML's Python bindings are missing)."""
    root = ET.fromstring(text)
    raw: dict[str, Any] = {"driver_version": root.findtext("driver_version"), "devices": []}
    cuda = root.findtext("cuda_version")
    if cuda:
        major, _, minor = cuda.partition(".")
        raw["cuda_driver_version"] = int(major) * 1000 + int(minor or 0) * 10
    for gpu in root.findall("gpu"):
        fb = gpu.find("fb_memory_usage")
        link = gpu.find("pci/pci_gpu_link_info")
        raw["devices"].append(
            {
                "name": gpu.findtext("product_name"),
                "memory_total": (_int_or_none(fb.findtext("total")) or 0) * MIB,
                "memory_free": None
                if fb.findtext("free") is None
                else _int_or_none(fb.findtext("free")) * MIB,
                "cuda_compute_capability": None,  # not in the XML; torch fills it in
                "pcie_gen": _int_or_none(link.findtext("pcie_gen/current_link_gen"))
                if link is not None
                else None,
                "pcie_max_gen": _int_or_none(link.findtext("pcie_gen/max_link_gen"))
                if link is not None
                else None,
                "pcie_width": _int_or_none(link.findtext("link_widths/current_link_width"))
                if link is not None
                else None,
                "pcie_max_width": _int_or_none(link.findtext("link_widths/max_link_width"))
                if link is not None
                else None,
            }
        )
    return parse_nvml(raw)


def read_nvml() -> dict[str, Any] | None:
    """Plain NVML values for :func:`parse_nvml`; None where there is no NVIDIA driver."""
    try:
        # Here, not at the top: nvidia-ml-py is installed on GPU machines only.
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None

    def maybe(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except pynvml.NVMLError:
            return None

    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        devices = []
        for h in handles:
            memory = pynvml.nvmlDeviceGetMemoryInfo(h)
            active = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                active += 1 if maybe(lambda: pynvml.nvmlDeviceGetNvLinkState(h, link)) == 1 else 0
            devices.append(
                {
                    "name": pynvml.nvmlDeviceGetName(h),
                    "memory_total": memory.total,
                    "memory_free": memory.free,
                    "cuda_compute_capability": maybe(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                    "pcie_gen": maybe(lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                    "pcie_width": maybe(lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
                    "pcie_max_gen": maybe(lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
                    "pcie_max_width": maybe(lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
                    "nvlink_active": active,
                }
            )
        p2p = {}
        for i, a in enumerate(handles):
            for j, b in enumerate(handles):
                if i < j:
                    p2p[f"{i},{j}"] = maybe(
                        lambda: pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ)
                    )
        return {
            "driver_version": maybe(pynvml.nvmlSystemGetDriverVersion),
            "cuda_driver_version": maybe(pynvml.nvmlSystemGetCudaDriverVersion),
            "devices": devices,
            "p2p": p2p,
        }
    finally:
        pynvml.nvmlShutdown()


def cuda_devices() -> list[dict[str, Any]]:
    """Each visible CUDA device as torch sees it (empty on a machine without GPUs). Its memory is what CUDA
    gives a process there, cudaMemGetInfo's total (torch.cuda.mem_get_info; the "total capacity" of torch's
    out-of-memory message): the device properties' and NVML's totals also count what the driver reserves,
    some 350 MiB on an RTX 4090, which no allocation can have."""
    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        _, total = torch.cuda.mem_get_info(index)
        devices.append(
            {
                "index": index,
                "name": props.name,
                "memory_total_bytes": int(total),
                "compute_capability": f"{props.major}.{props.minor}",
                "bf16_supported": bool(props.major >= 8),
                "fp16_supported": True,
            }
        )
    return devices


def merge_devices(torch_devices: list[dict[str, Any]], nvml: dict[str, Any] | None) -> list[dict[str, Any]]:
    """torch's view (what the ranks will use) completed with NVML's PCIe and free memory, by index.

    Assumes CUDA_VISIBLE_DEVICES is unset or in NVML order (CUDA_DEVICE_ORDER=PCI_BUS_ID).
    """
    merged = []
    nvml_devices = (nvml or {}).get("devices", [])
    for device in torch_devices:
        extra = nvml_devices[device["index"]] if device["index"] < len(nvml_devices) else {}
        merged.append({**{k: v for k, v in extra.items() if v is not None}, **device})
    return merged
