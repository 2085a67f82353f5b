"""Machine descriptions: hand-written (config/machines/*.yaml) or derived from the probe's fingerprint,
both in the shape of config/schemas/machine.schema.yaml, so the planner reads one format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from zerogate.errors import InputError
from zerogate.config.validation import to_input_error

SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schemas" / "machine.schema.yaml"


def check(machine: dict[str, Any], file: str) -> dict[str, Any]:
    """``machine`` if it follows the schema; else InputError naming ``file`` and the key."""
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(machine), key=lambda e: list(e.absolute_path))
    if errors:
        raise to_input_error(file, errors[0])
    return machine


def load_description(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "", "no such machine description")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise InputError(str(path), "", f"not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise InputError(str(path), "", "a machine description must be a mapping")
    return check(raw, str(path))


def from_fingerprint(fingerprint: dict[str, Any], name: str) -> dict[str, Any]:
    """The probed machine in the description schema (figures the probe cannot know stay null)."""
    accelerator = fingerprint["accelerator"]
    cpu, ram = fingerprint["cpu"], fingerprint["ram"]
    gpus = []
    for device in accelerator.get("devices", []):
        gpu = {k: device[k] for k in ("name", "memory_total_bytes", "compute_capability", "fp16_supported",
                                      "bf16_supported") if k in device}
        if device.get("memory_free_bytes") is not None:
            gpu["memory_free_bytes"] = device["memory_free_bytes"]
        if device.get("pcie"):
            gpu["pcie"] = {k: device["pcie"].get(k) for k in ("generation", "width", "max_generation", "max_width")}
        gpus.append(gpu)
    links = fingerprint.get("links", {})
    host = fingerprint.get("host", {})
    return {
        "name": name,
        "source": "probed",
        "nodes": 1,
        "gpus": gpus,
        "peer_to_peer": links.get("peer_to_peer_all_pairs"),
        "nvlink": links.get("nvlink_any"),
        # The probe's collective latency and bandwidth (zerogate.plan.collectives), for the floor.
        **({"collectives": fingerprint["collectives"]} if fingerprint.get("collectives") else {}),
        "host": {
            "cpu_model": cpu.get("model"),
            "physical_cores": cpu.get("physical_cores"),
            "logical_cores": cpu.get("logical_cores"),
            "numa_nodes": host.get("numa_nodes"),
            "ram_total_bytes": ram["total_bytes"],
            "ram_available_bytes": ram.get("available_bytes"),
            "shm_bytes": host.get("shm_bytes"),
            "pinned_memory_limit_bytes": host.get("pinned_memory_limit_bytes"),
            "memory_bandwidth_gbps": host.get("memory_bandwidth_gbps"),
            "cpu_peak_tflops_fp32": host.get("cpu_peak_tflops_fp32"),
        },
    }


def to_fingerprint(machine: dict[str, Any]) -> dict[str, Any]:
    """A described machine in the probe's fingerprint shape, so the config renders for it as for a probed one."""
    host = machine["host"]
    gpus = machine.get("gpus", [])
    return {
        "hostname": machine["name"],
        "platform": "described",
        "cpu": {"model": host.get("cpu_model"), "logical_cores": host.get("logical_cores"),
                "physical_cores": host.get("physical_cores"), "affinity_cores": host.get("logical_cores")},
        "ram": {"total_bytes": host["ram_total_bytes"], "available_bytes": host.get("ram_available_bytes")},
        "accelerator": {
            "kind": "cuda" if gpus else "cpu",
            "count": len(gpus),
            "devices": [{"index": i, "fp16_supported": True, "bf16_supported": False, **g} for i, g in enumerate(gpus)],
            **({} if gpus else {"cpu": {"fp16_supported": False}}),
        },
        "versions": {},
    }
