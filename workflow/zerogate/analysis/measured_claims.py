"""The seed's claims a run measures: the communication volume (comms/volume.json) and the claims a gate
measures (step time, peak memory, convergence: gates/verdicts.json), each judged on paper for the claimed box
and measured on the machine that ran (zerogate.analysis.claims holds the other judges and judges them all).
"""

from __future__ import annotations

import math

from zerogate.analysis import on_paper
from zerogate.analysis.claim_evidence import Evidence, Judged, verdict
from zerogate.analysis.comms import claim_verdict
from zerogate.config.claims import CommunicationClaim, ConvergenceClaim, PeakMemoryClaim, StepTimeClaim
from zerogate.contracts.verdicts import (
    CANNOT_JUDGE,
    DOES_NOT_HOLD,
    FAIL,
    HOLDS,
    HOLDS_ONLY_WHEN,
    INCONCLUSIVE,
    PASS,
    ClaimVerdict,
    GateVerdict,
    claim_from_gate,
)


def judge_communication(claim: CommunicationClaim, evidence: Evidence) -> Judged:
    ratio = claim.zero3_volume / claim.ddp_volume
    stated = claim.stated.value
    text = (
        f"ZeRO-3: all-gather Phi (forward) + all-gather Phi (backward) + reduce-scatter Phi = "
        f"{claim.zero3_volume:g} Phi; DDP: all-reduce = reduce-scatter + all-gather = "
        f"{claim.ddp_volume:g} Phi; "
        f"ratio {ratio:.2f} (stated {stated})"
    )
    paper = verdict(
        HOLDS if math.isclose(ratio, stated) else DOES_NOT_HOLD,
        text,
        "the ZeRO paper's volumes (Rajbhandari et al. 2020, section 7)",
    )
    return paper, measured_communication(claim, evidence)


def measured_communication(claim: CommunicationClaim, evidence: Evidence) -> ClaimVerdict:
    source = "measured communication volume per scheme (comms/volume.json)"
    if evidence.communication is None or evidence.claim_accumulation is None:
        return verdict(
            CANNOT_JUDGE, "not measured", source, why="not measured: no communication table for this run"
        )
    result = claim_verdict(evidence.communication, claim.stated.value, evidence.claim_accumulation)
    one, at_claim = result["at_accumulation_1"], result["at_claim_accumulation"]
    if one["measured"] is None:
        return verdict(
            CANNOT_JUDGE, "no measured ratio at accumulation 1", source, why=one["why"] or "not measured"
        )
    g = result["claim_accumulation"]
    later = (
        f"measured {at_claim['measured']:.3f} at the claim's accumulation {g}"
        if at_claim["measured"] is not None
        else f"accumulation {g} not measured here ({at_claim['why']})"
    )
    text = (
        f"{evidence.machine}, this profile's model ({evidence.communication.parameters:,} parameters): "
        "ZeRO-3 / "
        f"DDP volume per optimizer step measured {one['measured']:.3f} at accumulation 1 (stated "
        f"{result['stated']:g}, +-{result['tolerance']:.0%}); {later} (the paper's reading gives "
        f"{result['stated_at_claim_accumulation']:g})"
    )
    if result["holds_at_accumulation_1"]:
        return verdict(
            HOLDS_ONLY_WHEN,
            text,
            source,
            condition=f"the model is this run's ({evidence.communication.parameters:,} parameters)",
        )
    named = ", ".join(t["name"] for t in result["departures"][:3])
    return verdict(
        DOES_NOT_HOLD, text + (f"; the difference is DeepSpeed's: {named}" if named else ""), source
    )


def gate_claim_verdict(gate: GateVerdict | None, name: str, evidence: Evidence) -> ClaimVerdict:
    """The claim measured here by its gate (claim_from_gate: the one mapping of a gate's outcome)."""
    source = f"gate {name} (gates/verdicts.json)"
    if gate is None:
        return verdict(
            CANNOT_JUDGE, "the profile has no such gate", source, why=f"this profile has no gate {name}"
        )
    measured = "—" if gate.measured is None else f"{gate.measured:.4g}"
    text = (
        f"{evidence.machine}, this profile's model: measured {measured} {gate.unit} {gate.comparison} "
        f"{gate.threshold:g} {gate.unit}: {gate.verdict}"
    )
    reproduction = evidence.gates.reproduction if evidence.gates is not None else None
    faithful = bool(reproduction and reproduction.faithful)
    if gate.verdict == PASS and not faithful:
        text += "; not a faithful reproduction: " + "; ".join(reproduction.reasons if reproduction else [])
    parameters = evidence.ledger.parameters if evidence.ledger is not None else None
    condition = (
        f"the model and machine are this run's ({evidence.machine}"
        + (f", {parameters:,} parameters" if parameters else "")
        + "), not the claim's model on the claimed box"
    )
    return claim_from_gate(
        gate.verdict,
        text,
        source,
        faithful=faithful,
        condition=condition,
        why=gate.reason or "the gate was not measured",
    )


def judge_step_time(claim: StepTimeClaim, evidence: Evidence) -> Judged:
    paper = on_paper.judge_step_time(evidence.claimed_plan, claim.stated.value)
    return paper, gate_claim_verdict(evidence.gate(claim.gate), claim.gate, evidence)


def judge_peak_memory(claim: PeakMemoryClaim, evidence: Evidence) -> Judged:
    paper = on_paper.judge_memory(evidence.claimed_plan, claim.stated.value, claim.stated.unit)
    return paper, gate_claim_verdict(evidence.gate(claim.gate), claim.gate, evidence)


def judge_convergence(claim: ConvergenceClaim, evidence: Evidence) -> Judged:
    paper = verdict(
        CANNOT_JUDGE, "a statement about a training run", "—", why="convergence is measured, not predicted"
    )
    gates = [(name, evidence.gate(name)) for name in claim.gates]
    source = "gates " + ", ".join(claim.gates) + " (gates/verdicts.json)"
    missing = [name for name, gate in gates if gate is None]
    if missing or evidence.gates is None:
        return paper, verdict(
            CANNOT_JUDGE, "—", source, why="this profile has no gate " + ", ".join(missing or claim.gates)
        )
    # The optimizer steps each rank recorded, counted (the gates' record count, not the highest step).
    per_rank = evidence.gates.records.steps_per_rank
    ran = min(per_rank.values()) if per_rank else None
    text = "; ".join(f"{name}: {gate.verdict} (measured {gate.measured} {gate.unit})" for name, gate in gates)
    text += f"; {ran if ran is not None else 'no'} optimizer steps per rank (claimed {claim.steps})"
    verdicts = {gate.verdict for _, gate in gates}
    if FAIL in verdicts:
        return paper, verdict(DOES_NOT_HOLD, text, source)
    if verdicts != {PASS}:
        why = (
            "a gate's interval straddles its threshold"
            if INCONCLUSIVE in verdicts
            else "a gate was not measured"
        )
        return paper, verdict(CANNOT_JUDGE, text, source, why=why)
    if ran is None or ran < claim.steps:
        return paper, verdict(
            HOLDS_ONLY_WHEN,
            text,
            source,
            condition=f"the run is {ran or 0} steps long: {claim.steps} were claimed, not run here",
        )
    return paper, verdict(HOLDS, text, source)
