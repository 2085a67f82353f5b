"""Machine descriptions: hand-written (config/machines/*.yaml) or derived from the probe's fingerprint,
both in the shape of config/schemas/machine.schema.yaml, so the planner reads one format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from zerogate.config.validation import to_input_error
from zerogate.contracts.machine import Fingerprint
from zerogate.errors import InputError

SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schemas" / "machine.schema.yaml"


def check(machine: dict[str, Any], file: str) -> dict[str, Any]:
    """``machine`` if it follows the schema; else InputError naming ``file`` and the key."""
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(machine), key=lambda e: list(e.absolute_path)
    )
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


def from_fingerprint(fingerprint: Fingerprint, name: str) -> dict[str, Any]:
    """The probed machine in the description schema (figures the probe cannot know stay null)."""
    gpus = []
    for device in fingerprint.accelerator.devices:
        gpu: dict[str, Any] = {
            "name": device.name,
            "memory_total_bytes": device.memory_total_bytes,
            "fp16_supported": device.fp16_supported,
            "bf16_supported": device.bf16_supported,
        }
        if device.compute_capability is not None:
            gpu["compute_capability"] = device.compute_capability
        if device.memory_free_bytes is not None:
            gpu["memory_free_bytes"] = device.memory_free_bytes
        if device.pcie is not None:
            gpu["pcie"] = device.pcie.model_dump()
        gpus.append(gpu)
    cpu, ram, host = fingerprint.cpu, fingerprint.ram, fingerprint.host
    collectives = fingerprint.collectives
    return {
        "name": name,
        "source": "probed",
        "nodes": 1,
        "gpus": gpus,
        "peer_to_peer": fingerprint.links.peer_to_peer_all_pairs,
        "nvlink": fingerprint.links.nvlink_any,
        # The probe's collective latency and bandwidth (zerogate.predict.collectives), for the floor; what the
        # probe does not know is left out (the schema has no nulls there).
        **(
            {"collectives": collectives.model_dump(mode="json", by_alias=True, exclude_none=True)}
            if collectives is not None
            else {}
        ),
        "host": {
            "cpu_model": cpu.model,
            "physical_cores": cpu.physical_cores,
            "logical_cores": cpu.logical_cores,
            "numa_nodes": host.numa_nodes,
            "ram_total_bytes": ram.total_bytes,
            "ram_available_bytes": ram.available_bytes,
            "shm_bytes": host.shm_bytes,
            "pinned_memory_limit_bytes": host.pinned_memory_limit_bytes,
            "memory_bandwidth_gbps": host.memory_bandwidth_gbps,
            "cpu_peak_tflops_fp32": host.cpu_peak_tflops_fp32,
        },
    }


def to_fingerprint(machine: dict[str, Any]) -> Fingerprint:
    """A described machine in the probe's fingerprint shape, so the config renders for it as for a probed
    one."""
    host = machine["host"]
    gpus = machine.get("gpus", [])
    return Fingerprint.of(
        {
            "hostname": machine["name"],
            "platform": "described",
            "cpu": {
                "model": host.get("cpu_model"),
                "logical_cores": host.get("logical_cores"),
                "physical_cores": host.get("physical_cores"),
                "affinity_cores": host.get("logical_cores"),
            },
            "ram": {
                "total_bytes": host["ram_total_bytes"],
                "available_bytes": host.get("ram_available_bytes"),
            },
            "accelerator": {
                "kind": "cuda" if gpus else "cpu",
                "count": len(gpus),
                "devices": [
                    {
                        "index": i,
                        "fp16_supported": True,
                        "bf16_supported": False,
                        **{k: v for k, v in g.items() if k in DEVICE_KEYS},
                    }
                    for i, g in enumerate(gpus)
                ],
                **({} if gpus else {"cpu": {"fp16_supported": False}}),
            },
        },
        machine.get("name", "machine description"),
    )


# The keys of a described GPU that the fingerprint's device carries (the rest are the planner's).
DEVICE_KEYS = (
    "name",
    "memory_total_bytes",
    "memory_free_bytes",
    "compute_capability",
    "fp16_supported",
    "bf16_supported",
    "pcie",
    "memory_bandwidth_gbps",
)
