"""Pre-flight check: refuse in seconds a profile this machine cannot run, saying why.

A profile may state what it needs (``preflight:`` section); the probe's fingerprint says what the
machine has. The figures are the profile's own, each with the basis it states; the planner's fit check
(zerogate.predict.planner) derives needs from the memory ledger, and approve_plan acts on both.
"""

from __future__ import annotations

from typing import Any

from zerogate.contracts.machine import Fingerprint, Preflight
from zerogate.units import GIB


def shortfalls(needs: dict[str, Any], fingerprint: Fingerprint) -> list[str]:
    """What the machine lacks, one phrase each; empty when the profile can run here."""
    problems: list[str] = []
    accelerator = fingerprint.accelerator
    wanted = needs.get("accelerator", "any")
    if wanted != "any" and accelerator.kind != wanted:
        problems.append(f"needs {wanted} devices, this machine has {accelerator.kind} only")
    if wanted == "cuda":
        count = accelerator.count
        if count < needs.get("min_devices", 1):
            problems.append(f"needs {needs.get('min_devices', 1)} CUDA device(s), found {count}")
        smallest = min((d.memory_total_bytes for d in accelerator.devices), default=0) / GIB
        if count and smallest < needs.get("min_device_memory_GiB", 0):
            problems.append(
                f"needs {needs['min_device_memory_GiB']} GiB per device, the smallest has {smallest:.1f} GiB"
            )
    ram = (fingerprint.ram.total_bytes or 0) / GIB  # unknown RAM (a described box) meets no minimum
    if ram < needs.get("min_host_memory_GiB", 0):
        problems.append(
            f"needs {needs['min_host_memory_GiB']} GiB host memory, this machine has {ram:.1f} GiB"
        )
    return problems


def verdict(needs: dict[str, Any] | None, fingerprint: Fingerprint) -> Preflight:
    needs = needs or {}
    problems = shortfalls(needs, fingerprint)
    return Preflight(ok=not problems, needs=needs, shortfalls=problems)


def preflight_refusal(result: Preflight, profile_name: str) -> str:
    """The refusal message of a failed pre-flight verdict: each shortfall, and the basis the profile gives."""
    basis = result.needs.get("basis", "")
    return f"profile {profile_name} refused by the pre-flight check: {'; '.join(result.shortfalls)}" + (
        f" ({basis})" if basis else ""
    )
