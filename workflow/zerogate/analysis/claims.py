"""A claim's statements judged: on paper for the claimed box, and measured on the machine that ran.

Each statement is data (a claim file, config/claims/<name>.yaml: an id, the statement with its original
number and unit, the kind of check; docs/claims.md). A judge per kind turns it and the evidence
(:class:`Evidence`: the plan of the claimed box, this run's plan, the ledger table, the gates' verdicts, the
two machines) into two verdicts from a fixed vocabulary (zerogate.contracts.verdicts.ClaimVerdict), each
with its evidence and the gate or table it comes from. Torch-free: the plans are computed by the planner in
their own rules; this module only reads and compares them. The judges of what the run measures
(communication, the gates' claims) are zerogate.analysis.measured_claims'; :class:`Evidence` is
zerogate.analysis.claim_evidence's.

Units: GB = 10^9 bytes, GiB = 2^30 bytes (zerogate.units), always as the claim writes them. The claims
themselves are a claim file's entries (validated against config/schemas/claims.schema.json), typed by
zerogate.config.claims, one model per kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from zerogate.analysis import on_paper
from zerogate.analysis.claim_evidence import Evidence, Judged, gpus_here, not_measured_on_cpu, verdict
from zerogate.analysis.measured_claims import (
    judge_communication,
    judge_convergence,
    judge_peak_memory,
    judge_step_time,
)
from zerogate.config.claims import (
    ArithmeticClaim,
    ClaimsFile,
    FitsClaim,
    HardwareClaim,
    LedgerFormulaClaim,
    NotTestedClaim,
    OffloadFormulaClaim,
)
from zerogate.config.machines import MachineDescription
from zerogate.contracts.plan import Plan, SchemeLedger
from zerogate.contracts.verdicts import (
    CANNOT_JUDGE,
    DOES_NOT_HOLD,
    HOLDS,
    HOLDS_ONLY_WHEN,
    ClaimedBox,
    ClaimVerdict,
    ClaimVerdicts,
    JudgedClaim,
)
from zerogate.units import UNIT_BYTES, format_bytes

# A formula "matches" an accounting of the same tensors when they differ by less than this (partition
# padding and the persistent small parameters make zerogate's bytes a little larger than k * Phi / N).
FORMULA_TOLERANCE = 0.02
SCHEME_LABELS = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "zero3_offload_optimizer": "ZeRO-3 + optimizer offload",
    "zero3_offload_all": "ZeRO-3 + full offload",
}


def rounding_tolerance(stated: float) -> float:
    """Half a unit of the stated figure's last written digit: 208.6 -> 0.05, 14 -> 0.5."""
    text = repr(float(stated)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10**-decimals


def stated_figure_holds(computed_bytes: float, stated: float, unit: str) -> bool:
    """Whether ``computed_bytes`` rounds to ``stated`` ``unit`` at the precision the claim wrote."""
    return abs(computed_bytes / UNIT_BYTES[unit] - stated) <= rounding_tolerance(stated) + 1e-9


def formula_bytes(replicated: float, sharded: float, phi: float, ranks: int) -> float:
    """replicated * Phi + sharded * Phi / N, bytes."""
    return replicated * phi + sharded * phi / ranks


def _on_paper_source(evidence: Evidence) -> str:
    return f"plan of the claimed box ({evidence.claimed_plan.machine}, claims/claimed_box_plan.json)"


# --- judges: each returns (on paper for the claimed box, measured on the machine that ran); those of what
# the run measures are zerogate.analysis.measured_claims' -------------------------------------------------


def judge_arithmetic(claim: ArithmeticClaim, evidence: Evidence) -> Judged:
    unit, phi = claim.unit, claim.phi
    lines, wrong = [], []
    total = 0.0
    for name, per_param in claim.terms.items():
        computed = per_param * phi
        total += computed
        stated = claim.stated.get(name)
        lines.append(
            f"{name}: {per_param} B x {phi:.3g} = {computed / UNIT_BYTES[unit]:.4g} {unit}"
            + ("" if stated is None else f" (stated {stated} {unit})")
        )
        if stated is not None and not stated_figure_holds(computed, stated, unit):
            wrong.append(name)
    if "total" in claim.stated:
        lines.append(
            f"total {total / UNIT_BYTES[unit]:.4g} {unit} = {format_bytes(total)} (stated "
            f"{claim.stated['total']} {unit})"
        )
        if not stated_figure_holds(total, claim.stated["total"], unit):
            wrong.append("total")
    paper = verdict(
        DOES_NOT_HOLD if wrong else HOLDS,
        "; ".join(lines) + (f"; wrong: {', '.join(wrong)}" if wrong else ""),
        "the claim's own formula at its Phi",
    )
    measured = verdict(
        CANNOT_JUDGE,
        "arithmetic on the stated parameter count",
        "—",
        why=f"a statement about {phi:.3g} parameters' bytes, not a measurement",
    )
    return paper, measured


def _model_state_bytes(row: SchemeLedger) -> int:
    """zerogate's model-state bytes per rank of a scheme, wherever they live (device or host)."""
    zg = row.zerogate
    states = ("parameters", "master_parameters", "gradients", "optimizer_states", "persistent_parameters")
    merged = {**zg.device_terms_bytes, **zg.host_terms_per_rank_bytes}
    return sum(v for k, v in merged.items() if k in states)


def judge_ledger_formula(claim: LedgerFormulaClaim, evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    led = plan.ledger
    phi, ranks = led.parameters, led.ranks
    a, k = claim.replicated, claim.sharded
    notes, wrong = [], []
    stated = claim.stated
    if stated:
        at_stated = formula_bytes(a, k, stated.phi, stated.ranks)
        ok = stated_figure_holds(at_stated, stated.value, stated.unit)
        notes.append(
            f"at Phi = {stated.phi:.3g}, N = {stated.ranks}: {format_bytes(at_stated)} "
            f"(stated {stated.value} {stated.unit}{'' if ok else ': wrong'})"
        )
        if not ok:
            wrong.append("the stated figure")
    predicted = formula_bytes(a, k, phi, ranks)
    row = led.schemes[claim.scheme]
    accounted = _model_state_bytes(row)
    estimate = row.deepspeed
    notes.append(
        f"claimed box ({phi:,} parameters counted, N = {ranks}, {plan.dtype}): formula "
        f"{format_bytes(predicted)}, zerogate's model states {format_bytes(accounted)}"
        + (
            ""
            if estimate is None
            else f", DeepSpeed's estimator {format_bytes(estimate.device_per_rank_bytes)}"
            " (its ZeRO-3 line counts 18 Phi / N + 4 x the largest layer)"
            if claim.scheme == "zero3"
            else f", DeepSpeed's estimator {format_bytes(estimate.device_per_rank_bytes)}"
        )
    )
    if wrong:
        paper = verdict(DOES_NOT_HOLD, "; ".join(notes), _on_paper_source(evidence))
    elif abs(accounted - predicted) <= FORMULA_TOLERANCE * predicted:
        paper = verdict(HOLDS, "; ".join(notes), _on_paper_source(evidence))
    else:
        paper = verdict(
            HOLDS_ONLY_WHEN,
            "; ".join(notes),
            _on_paper_source(evidence),
            condition=f"parameters and gradients are 16-bit with an fp32 master copy (the claimed box's "
            f"{plan.dtype} accounting differs by {100 * (accounted - predicted) / predicted:+.1f} %)",
        )
    return paper, _measured_model_states(claim, evidence, a, k)


def _measured_model_states(claim: LedgerFormulaClaim, evidence: Evidence, a: float, k: float) -> ClaimVerdict:
    """The formula against the model-state bytes each rank of this run held (the ledger table)."""
    source = "ledger table (ledger/ledger_vs_measured.json, held tensors)"
    if evidence.ledger is None:
        return verdict(CANNOT_JUDGE, "no ledger table", source, why="this run has no ledger table")
    scheme = evidence.ledger.scheme
    if not scheme.startswith(claim.scheme):
        return verdict(
            CANNOT_JUDGE,
            f"this run trains {SCHEME_LABELS.get(scheme, scheme)}",
            source,
            why=f"this run trains {SCHEME_LABELS.get(scheme, scheme)}, not {SCHEME_LABELS[claim.scheme]}",
        )
    phi, ranks, dtype = evidence.ledger.parameters, evidence.ledger.ranks, evidence.ledger.dtype
    held = evidence.ledger.held_totals()
    if not held:
        return verdict(CANNOT_JUDGE, "no held-tensor rows", source, why="the run recorded no held tensors")
    predicted = formula_bytes(a, k, phi, ranks)
    worst = max(held.values())
    text = (
        f"{phi:,} parameters, N = {ranks}, {dtype}: formula {format_bytes(predicted)}, held per rank "
        + ", ".join(f"rank {r}: {format_bytes(v)}" for r, v in sorted(held.items()))
    )
    if abs(worst - predicted) <= FORMULA_TOLERANCE * predicted:
        return verdict(HOLDS, text, source)
    if dtype == "fp32":
        return verdict(
            HOLDS_ONLY_WHEN,
            text,
            source,
            condition=f"parameters and gradients are 16-bit: this {dtype} run holds "
            f"{worst / (phi / ranks):.1f} bytes per parameter share, the formula counts {k + a * ranks:g}",
        )
    return verdict(DOES_NOT_HOLD, text, source)


def judge_offload_formula(claim: OffloadFormulaClaim, evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    phi, ranks = plan.ledger.parameters, plan.ledger.ranks
    stated = claim.stated
    at_stated = formula_bytes(0, claim.sharded, stated.phi, stated.ranks)
    arithmetic_ok = stated_figure_holds(at_stated, stated.value, stated.unit)
    formula = formula_bytes(0, claim.sharded, phi, ranks)
    optimizer_only = plan.ledger.schemes["zero3_offload_optimizer"]
    everything = plan.ledger.schemes["zero3_offload_all"]
    params_on_device = optimizer_only.zerogate.device_terms_bytes.get("parameters", 0)
    all_device_states = sum(
        v
        for key, v in everything.zerogate.device_terms_bytes.items()
        if key in ("parameters", "persistent_parameters", "gathered_parameters")
    )
    ds_opt = optimizer_only.deepspeed.device_per_rank_bytes
    ds_all = everything.deepspeed.device_per_rank_bytes
    text = (
        f"at Phi = {stated.phi:.3g}, N = {stated.ranks}: 2 Phi / N = {format_bytes(at_stated)} "
        f"(stated {stated.value} {stated.unit}{'' if arithmetic_ok else ': wrong'}); claimed box "
        f"({phi:,} parameters): 2 Phi / N = {format_bytes(formula)}; optimizer offload only: zerogate's "
        f"parameters on the GPU {format_bytes(params_on_device)}, DeepSpeed's estimator "
        f"{format_bytes(ds_opt)} "
        f"(2 Phi / N + 4 x largest layer); the published config (offload_param: cpu as well): GPU holds "
        f"persistent + gathered parameters {format_bytes(all_device_states)}, DeepSpeed's estimator "
        f"{format_bytes(ds_all)}"
    )
    if not arithmetic_ok:
        paper = verdict(DOES_NOT_HOLD, text, _on_paper_source(evidence))
    elif abs(params_on_device - formula) <= FORMULA_TOLERANCE * formula:
        paper = verdict(
            HOLDS_ONLY_WHEN,
            text,
            _on_paper_source(evidence),
            condition="only the optimizer is offloaded (offload_param none) and GB means 10^9 bytes: "
            "the published config also offloads the parameters, and then the GPU holds "
            "far less than 2 Phi / N",
        )
    else:
        paper = verdict(DOES_NOT_HOLD, text, _on_paper_source(evidence))
    why = not_measured_on_cpu(evidence)
    measured = (
        verdict(CANNOT_JUDGE, "per-GPU bytes", "—", why=why)
        if why
        else verdict(
            CANNOT_JUDGE, "per-GPU bytes", "—", why="no per-term device measurement of the offloaded run"
        )
    )
    return paper, measured


def judge_hardware(claim: HardwareClaim, evidence: Evidence) -> Judged:
    box = evidence.claimed_machine
    described = [] if box is None else box.gpus
    notes, wrong = [], []
    for stated in claim.gpus:
        gpu = next((g for g in described if stated.name in g.name), None)
        if gpu is None:
            notes.append(f"{stated.name}: not in the claimed box's description")
            wrong.append(stated.name)
            continue
        actual = gpu.memory_total_bytes
        # Vendors' "GB" of GPU memory are binary (chips of 2^30 bytes), so the stated figure is compared in
        # both readings: it holds when either matches.
        matches = any(
            math.isclose(actual, stated.memory * UNIT_BYTES[u], rel_tol=0.05) for u in ("GB", "GiB")
        )
        notes.append(
            f"{gpu.name}: {format_bytes(actual)} in the description (stated {stated.memory} {stated.unit})"
        )
        if not matches:
            wrong.append(stated.name)
    name, about = ("?", "") if box is None else (box.name, box.description or "")
    source = f"the claimed box's description ({name}: {about.strip()})"
    paper = verdict(DOES_NOT_HOLD if wrong else HOLDS, "; ".join(notes), source)
    here = gpus_here(evidence.fingerprint)
    measured = verdict(
        CANNOT_JUDGE,
        f"GPUs here: {', '.join(here) or 'none'}",
        "probe/hardware.json",
        why=f"{evidence.machine} is not the claimed box",
    )
    return paper, measured


def judge_fits(claim: FitsClaim, evidence: Evidence) -> Judged:
    """The planner's fit for the claimed box; a statement about that box, not measured on this machine."""
    plan = evidence.claimed_plan
    fit = on_paper.judge_fit(plan)
    paper = fit.model_copy(
        update={
            "evidence": f"{fit.evidence}; largest micro-batch per rank that fits: "
            f"{plan.largest_micro_batch_per_rank} (the claimed profile's: {plan.ledger.micro_batch})"
        }
    )
    measured = verdict(
        CANNOT_JUDGE,
        "a statement about the claimed box's memory",
        "—",
        why=f"{evidence.machine} is not the claimed box; this run's own fit is its plan's (plan/plan.txt)",
    )
    return paper, measured


def judge_not_tested(claim: NotTestedClaim, evidence: Evidence) -> Judged:
    untested = verdict(CANNOT_JUDGE, "—", "—", why=claim.why)
    return untested, untested


JUDGES: dict[str, Callable[[Any, Evidence], Judged]] = {
    "arithmetic": judge_arithmetic,
    "ledger_formula": judge_ledger_formula,
    "offload_formula": judge_offload_formula,
    "communication": judge_communication,
    "step_time": judge_step_time,
    "peak_memory": judge_peak_memory,
    "fits": judge_fits,
    "convergence": judge_convergence,
    "hardware": judge_hardware,
    "not_tested": judge_not_tested,
}


def judge(claims: ClaimsFile, evidence: Evidence, name: str) -> ClaimVerdicts:
    """Every statement of the claim ``name`` (its file's stem) judged: claims/<name>/verdicts.json."""
    judged = []
    for claim in claims.claims:
        paper, measured = JUDGES[claim.kind](claim, evidence)
        judged.append(
            JudgedClaim(
                id=claim.id,
                statement=claim.statement,
                kind=claim.kind,
                on_paper=paper,
                measured_here=measured,
            )
        )
    return ClaimVerdicts(
        claim=name,
        source=claims.source,
        claimed_box=ClaimedBox(**claims.claimed_box.model_dump(), machine_name=evidence.claimed_plan.machine),
        machine=evidence.machine,
        claims=judged,
    )


def judge_on_paper(
    claims: ClaimsFile, claimed_plan: Plan, claimed_machine: MachineDescription
) -> list[tuple[str, ClaimVerdict]]:
    """Each claim's verdict on paper for the claimed box: the judges' first verdict, which reads only the
    claimed box's plan and description (what plan.txt prints, in the report's words)."""
    evidence = Evidence(claimed_plan=claimed_plan, claimed_machine=claimed_machine)
    return [(claim.id, JUDGES[claim.kind](claim, evidence)[0]) for claim in claims.claims]


def on_paper_text(
    name: str, claims: ClaimsFile, claimed_plan: Plan, claimed_machine: MachineDescription
) -> str:
    """The claim ``name`` judged on paper for its claimed box, as the plan target prints it
    (claims/<name>/on_paper.txt): where it was published, the box, then one line per statement."""
    box = claims.claimed_box
    lines = [
        f"claim {name} ({claims.source}), on paper for the claimed box {claimed_plan.machine} "
        f"(profile {box.profile}, {box.machine}):"
    ]
    for claim_id, judged in judge_on_paper(claims, claimed_plan, claimed_machine):
        lines.append(f"  {claim_id}: {judged.text}")
        if judged.evidence not in ("", "—"):
            lines.append(f"    evidence: {judged.evidence}")
    return "\n".join(lines)
