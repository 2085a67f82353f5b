"""What the seed's claims are judged on (:class:`Evidence`), and the pieces every judge shares: a verdict
with its evidence and source, and the GPUs the probe found."""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.machines import MachineDescription
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.plan import Plan
from zerogate.contracts.verdicts import ClaimVerdict, GateVerdict, GateVerdicts


def verdict(
    word: str, evidence: str, source: str, condition: str | None = None, why: str | None = None
) -> ClaimVerdict:
    return ClaimVerdict(verdict=word, evidence=evidence, source=source, condition=condition, why=why)


@dataclass(frozen=True)
class Evidence:
    """What the judges read: the planner's plan for the claimed box (``claimed_plan``), this run's plan
    (``run_plan``), the ledger table, the gates' verdicts, the claimed box's description
    (``claimed_machine``; None: none at hand), this machine's probe (None for a described machine), the
    communication table and the claimed profile's gradient accumulation. Only the claimed plan and box are
    needed on paper."""

    claimed_plan: Plan
    run_plan: Plan | None = None
    ledger: LedgerTable | None = None
    gates: GateVerdicts | None = None
    claimed_machine: MachineDescription | None = None
    fingerprint: Fingerprint | None = None
    machine: str = "this machine"
    communication: CommsVolume | None = None
    claim_accumulation: int | None = None

    def gate(self, name: str) -> GateVerdict | None:
        return None if self.gates is None else self.gates.gate(name)


def gpus_here(fingerprint: Fingerprint | None) -> list[str]:
    """Names of the GPUs the probe found (probe/hardware.json); none on the CPU accelerator."""
    if fingerprint is None or fingerprint.accelerator.kind != "cuda":
        return []
    return [d.name for d in fingerprint.accelerator.devices]


def not_measured_on_cpu(evidence: Evidence) -> str | None:
    """Why a per-GPU statement cannot be measured on this machine, or None when it has GPUs."""
    if gpus_here(evidence.fingerprint):
        return None
    return f"{evidence.machine} has no GPU: what the claim puts in GPU memory is host RAM here"


# What each judge returns: (on paper for the claimed box, measured on the machine that ran).
Judged = tuple[ClaimVerdict, ClaimVerdict]
