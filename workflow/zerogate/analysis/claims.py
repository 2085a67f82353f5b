"""The seed's own statements judged: on paper for the claimed box, and measured on the machine that ran.

Each statement is data (config/claims.yaml: an id, the statement with its original number and unit, the
kind of check). A judge per kind turns it and the evidence (:class:`Evidence`: the plan of the claimed box,
this run's plan, the ledger table, the gates' verdicts, the two machines) into two verdicts from a fixed
vocabulary (:data:`VERDICTS`), each with its evidence and the gate or table it comes from. Torch-free: the
plans are computed by the planner in their own rules; this module only reads and compares them.

Units: GB = 10^9 bytes, GiB = 2^30 bytes (zerogate.units), always as the claim writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from zerogate.analysis.comms import claim_verdict
from zerogate.units import GB, GIB

HOLDS = "holds"
HOLDS_ONLY_WHEN = "holds only when"
DOES_NOT_HOLD = "does not hold"
CANNOT_JUDGE = "cannot be judged here"
VERDICTS = (HOLDS, HOLDS_ONLY_WHEN, DOES_NOT_HOLD, CANNOT_JUDGE)
UNIT_BYTES = {"GB": GB, "GiB": GIB}
# A formula "matches" an accounting of the same tensors when they differ by less than this (partition
# padding and the persistent small parameters make zerogate's bytes a little larger than k * Phi / N).
FORMULA_TOLERANCE = 0.02
SCHEME_LABELS = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                 "zero3_offload_optimizer": "ZeRO-3 + optimizer offload", "zero3_offload_all": "ZeRO-3 + full offload"}


@dataclass(frozen=True)
class Verdict:
    verdict: str
    evidence: str
    source: str
    condition: str | None = None  # for HOLDS_ONLY_WHEN
    why: str | None = None  # for CANNOT_JUDGE

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")
        if self.verdict == HOLDS_ONLY_WHEN and not self.condition:
            raise ValueError("'holds only when' needs its condition")
        if self.verdict == CANNOT_JUDGE and not self.why:
            raise ValueError("'cannot be judged here' needs its reason")

    @property
    def text(self) -> str:
        if self.verdict == HOLDS_ONLY_WHEN:
            return f"holds only when {self.condition}"
        if self.verdict == CANNOT_JUDGE:
            return f"cannot be judged here ({self.why})"
        return self.verdict

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "text": self.text, "condition": self.condition, "why": self.why,
                "evidence": self.evidence, "source": self.source}


@dataclass(frozen=True)
class Evidence:
    """What the judges read. ``claimed_plan``: the planner's plan.json for the claimed box;
    ``run_plan``: this run's; ``ledger``: ledger/ledger_vs_measured.json; ``gates``: gates/verdicts.json;
    ``claimed_machine``: the claimed box's description; ``fingerprint``: this machine's probe (None for a
    described machine)."""

    claimed_plan: dict[str, Any]
    run_plan: dict[str, Any] | None = None
    ledger: dict[str, Any] | None = None
    gates: dict[str, Any] | None = None
    claimed_machine: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    machine: str = "this machine"
    # comms/volume.json (zerogate.analysis.comms) and the claimed profile's gradient accumulation.
    communication: dict[str, Any] | None = None
    claim_accumulation: int | None = None

    def gate(self, name: str) -> dict[str, Any] | None:
        return next((g for g in (self.gates or {}).get("gates", []) if g["name"] == name), None)


def both_units(n: float) -> str:
    """Bytes in GiB and GB side by side, the claim's units (MiB and MB, kB below 0.01 GiB: ledger.human)."""
    if abs(n) < 0.01 * GIB:
        from zerogate.plan.ledger import human

        return human(n)
    return f"{n / GIB:.2f} GiB ({n / GB:.2f} GB)"


def rounding_tolerance(stated: float) -> float:
    """Half a unit of the stated figure's last written digit: 208.6 -> 0.05, 14 -> 0.5."""
    text = repr(float(stated)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10 ** -decimals


def stated_figure_holds(computed_bytes: float, stated: float, unit: str) -> bool:
    """Whether ``computed_bytes`` rounds to ``stated`` ``unit`` at the precision the claim wrote."""
    return abs(computed_bytes / UNIT_BYTES[unit] - stated) <= rounding_tolerance(stated) + 1e-9


def formula_bytes(replicated: float, sharded: float, phi: float, ranks: int) -> float:
    """replicated * Phi + sharded * Phi / N, bytes."""
    return replicated * phi + sharded * phi / ranks


def _on_paper_source(evidence: Evidence) -> str:
    return f"plan of the claimed box ({evidence.claimed_plan['machine']}, claims/claimed_box_plan.json)"


def gpus_here(fingerprint: dict[str, Any] | None) -> list[str]:
    """Names of the GPUs the probe found (probe/hardware.json); none on the CPU accelerator."""
    accelerator = (fingerprint or {}).get("accelerator") or {}
    return [d.get("name", "") for d in accelerator.get("devices") or []] if accelerator.get("kind") == "cuda" else []


def _not_measured_on_cpu(evidence: Evidence) -> str | None:
    """Why a per-GPU statement cannot be measured on this machine, or None when it has GPUs."""
    if gpus_here(evidence.fingerprint):
        return None
    return f"{evidence.machine} has no GPU: what the claim puts in GPU memory is host RAM here"


# --- judges: each returns (on paper for the claimed box, measured on the machine that ran) -----------

Judged = tuple[Verdict, Verdict]


def judge_arithmetic(claim: dict[str, Any], evidence: Evidence) -> Judged:
    unit, phi = claim["unit"], claim["phi"]
    lines, wrong = [], []
    total = 0.0
    for name, per_param in claim["terms"].items():
        computed = per_param * phi
        total += computed
        stated = claim["stated"].get(name)
        lines.append(f"{name}: {per_param} B x {phi:.3g} = {computed / UNIT_BYTES[unit]:.4g} {unit}"
                     + ("" if stated is None else f" (stated {stated} {unit})"))
        if stated is not None and not stated_figure_holds(computed, stated, unit):
            wrong.append(name)
    if "total" in claim["stated"]:
        lines.append(f"total {total / UNIT_BYTES[unit]:.4g} {unit} = {both_units(total)} (stated {claim['stated']['total']} {unit})")
        if not stated_figure_holds(total, claim["stated"]["total"], unit):
            wrong.append("total")
    paper = Verdict(DOES_NOT_HOLD if wrong else HOLDS, "; ".join(lines)
                    + (f"; wrong: {', '.join(wrong)}" if wrong else ""), "the claim's own formula at its Phi")
    measured = Verdict(CANNOT_JUDGE, "arithmetic on the stated parameter count", "—",
                       why="a statement about a 14B model's bytes, not a measurement")
    return paper, measured


def _scheme_row(plan: dict[str, Any], scheme: str) -> dict[str, Any]:
    return plan["ledger"]["schemes"][scheme]


def _model_state_bytes(row: dict[str, Any]) -> int:
    """zerogate's model-state bytes per rank of a scheme, wherever they live (device or host)."""
    zg = row["zerogate"]
    states = ("parameters", "master_parameters", "gradients", "optimizer_states", "persistent_parameters")
    merged = {**zg["device_terms(bytes)"], **zg["host_terms_per_rank(bytes)"]}
    return sum(v for k, v in merged.items() if k in states)


def judge_ledger_formula(claim: dict[str, Any], evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    led = plan["ledger"]
    phi, ranks = led["parameters"], led["ranks"]
    a, k = claim["replicated"], claim["sharded"]
    label = SCHEME_LABELS[claim["scheme"]]
    notes, wrong = [], []
    stated = claim.get("stated")
    if stated:
        at_stated = formula_bytes(a, k, stated["phi"], stated["ranks"])
        ok = stated_figure_holds(at_stated, stated["value"], stated["unit"])
        notes.append(f"at Phi = {stated['phi']:.3g}, N = {stated['ranks']}: {both_units(at_stated)} "
                     f"(stated {stated['value']} {stated['unit']}{'' if ok else ': wrong'})")
        if not ok:
            wrong.append("the stated figure")
    predicted = formula_bytes(a, k, phi, ranks)
    row = _scheme_row(plan, claim["scheme"])
    accounted = _model_state_bytes(row)
    estimate = row["deepspeed"]
    notes.append(f"claimed box ({phi:,} parameters counted, N = {ranks}, {plan['dtype']}): formula "
                 f"{both_units(predicted)}, zerogate's model states {both_units(accounted)}"
                 + ("" if estimate is None else f", DeepSpeed's estimator {both_units(estimate['device_per_rank(bytes)'])}"
                    " (its ZeRO-3 line counts 18 Phi / N + 4 x the largest layer)" if claim["scheme"] == "zero3"
                    else f", DeepSpeed's estimator {both_units(estimate['device_per_rank(bytes)'])}"))
    if wrong:
        paper = Verdict(DOES_NOT_HOLD, "; ".join(notes), _on_paper_source(evidence))
    elif abs(accounted - predicted) <= FORMULA_TOLERANCE * predicted:
        paper = Verdict(HOLDS, "; ".join(notes), _on_paper_source(evidence))
    else:
        paper = Verdict(HOLDS_ONLY_WHEN, "; ".join(notes), _on_paper_source(evidence),
                        condition=f"parameters and gradients are 16-bit with an fp32 master copy (the claimed box's "
                                  f"{plan['dtype']} accounting differs by {100 * (accounted - predicted) / predicted:+.1f} %)")
    return paper, _measured_model_states(claim, evidence, a, k)


def _measured_model_states(claim: dict[str, Any], evidence: Evidence, a: float, k: float) -> Verdict:
    """The formula against the model-state bytes each rank of this run held (the ledger table)."""
    source = "ledger table (ledger/ledger_vs_measured.json, held tensors)"
    if evidence.ledger is None:
        return Verdict(CANNOT_JUDGE, "no ledger table", source, why="this run has no ledger table")
    scheme = evidence.ledger["scheme"]
    if not scheme.startswith(claim["scheme"]):
        return Verdict(CANNOT_JUDGE, f"this run trains {SCHEME_LABELS.get(scheme, scheme)}", source,
                       why=f"this run trains {SCHEME_LABELS.get(scheme, scheme)}, not {SCHEME_LABELS[claim['scheme']]}")
    phi, ranks, dtype = evidence.ledger["parameters"], evidence.ledger["ranks"], evidence.ledger["dtype"]
    held = {r["rank"]: r["measured(bytes)"] for r in evidence.ledger["rows"] if r["term"] == "model_states_total"}
    if not held:
        return Verdict(CANNOT_JUDGE, "no held-tensor rows", source, why="the run recorded no held tensors")
    predicted = formula_bytes(a, k, phi, ranks)
    worst = max(held.values())
    text = (f"{phi:,} parameters, N = {ranks}, {dtype}: formula {both_units(predicted)}, held per rank "
            + ", ".join(f"rank {r}: {both_units(v)}" for r, v in sorted(held.items())))
    if abs(worst - predicted) <= FORMULA_TOLERANCE * predicted:
        return Verdict(HOLDS, text, source)
    if dtype == "fp32":
        return Verdict(HOLDS_ONLY_WHEN, text, source,
                       condition=f"parameters and gradients are 16-bit: this {dtype} run holds "
                                 f"{worst / (phi / ranks):.1f} bytes per parameter share, the formula counts {k + a * ranks:g}")
    return Verdict(DOES_NOT_HOLD, text, source)


def judge_offload_formula(claim: dict[str, Any], evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    phi, ranks = plan["ledger"]["parameters"], plan["ledger"]["ranks"]
    stated = claim["stated"]
    at_stated = formula_bytes(0, claim["sharded"], stated["phi"], stated["ranks"])
    arithmetic_ok = stated_figure_holds(at_stated, stated["value"], stated["unit"])
    formula = formula_bytes(0, claim["sharded"], phi, ranks)
    optimizer_only = _scheme_row(plan, "zero3_offload_optimizer")
    everything = _scheme_row(plan, "zero3_offload_all")
    params_on_device = optimizer_only["zerogate"]["device_terms(bytes)"].get("parameters", 0)
    all_device_states = sum(v for key, v in everything["zerogate"]["device_terms(bytes)"].items()
                            if key in ("parameters", "persistent_parameters", "gathered_parameters"))
    ds_opt = optimizer_only["deepspeed"]["device_per_rank(bytes)"]
    ds_all = everything["deepspeed"]["device_per_rank(bytes)"]
    text = (f"at Phi = {stated['phi']:.3g}, N = {stated['ranks']}: 2 Phi / N = {both_units(at_stated)} "
            f"(stated {stated['value']} {stated['unit']}{'' if arithmetic_ok else ': wrong'}); claimed box "
            f"({phi:,} parameters): 2 Phi / N = {both_units(formula)}; optimizer offload only: zerogate's "
            f"parameters on the GPU {both_units(params_on_device)}, DeepSpeed's estimator {both_units(ds_opt)} "
            f"(2 Phi / N + 4 x largest layer); the published config (offload_param: cpu as well): GPU holds "
            f"persistent + gathered parameters {both_units(all_device_states)}, DeepSpeed's estimator {both_units(ds_all)}")
    if not arithmetic_ok:
        paper = Verdict(DOES_NOT_HOLD, text, _on_paper_source(evidence))
    elif abs(params_on_device - formula) <= FORMULA_TOLERANCE * formula:
        paper = Verdict(HOLDS_ONLY_WHEN, text, _on_paper_source(evidence),
                        condition="only the optimizer is offloaded (offload_param none) and GB means 10^9 bytes: "
                                  "the published config also offloads the parameters, and then the GPU holds "
                                  "far less than 2 Phi / N")
    else:
        paper = Verdict(DOES_NOT_HOLD, text, _on_paper_source(evidence))
    why = _not_measured_on_cpu(evidence)
    measured = (Verdict(CANNOT_JUDGE, "per-GPU bytes", "—", why=why) if why else
                Verdict(CANNOT_JUDGE, "per-GPU bytes", "—", why="no per-term device measurement of the offloaded run"))
    return paper, measured


def judge_communication(claim: dict[str, Any], evidence: Evidence) -> Judged:
    ratio = claim["zero3_volume"] / claim["ddp_volume"]
    stated = claim["stated"]["value"]
    text = (f"ZeRO-3: all-gather Phi (forward) + all-gather Phi (backward) + reduce-scatter Phi = "
            f"{claim['zero3_volume']:g} Phi; DDP: all-reduce = reduce-scatter + all-gather = {claim['ddp_volume']:g} Phi; "
            f"ratio {ratio:.2f} (stated {stated})")
    paper = Verdict(HOLDS if math.isclose(ratio, stated) else DOES_NOT_HOLD, text,
                    "the ZeRO paper's volumes (Rajbhandari et al. 2020, section 7)")
    return paper, _measured_communication(claim, evidence)


def _measured_communication(claim: dict[str, Any], evidence: Evidence) -> Verdict:
    source = "measured communication volume per scheme (comms/volume.json)"
    if evidence.communication is None or evidence.claim_accumulation is None:
        return Verdict(CANNOT_JUDGE, "not measured", source, why="not measured: no communication table for this run")
    result = claim_verdict(evidence.communication, claim["stated"]["value"], evidence.claim_accumulation)
    one, at_claim = result["at_accumulation_1"], result["at_claim_accumulation"]
    if one["measured"] is None:
        return Verdict(CANNOT_JUDGE, "no measured ratio at accumulation 1", source, why=one["why"] or "not measured")
    g = result["claim_accumulation"]
    later = (f"measured {at_claim['measured']:.3f} at the claim's accumulation {g}" if at_claim["measured"] is not None
             else f"accumulation {g} not measured here ({at_claim['why']})")
    text = (f"{evidence.machine}, this profile's model ({evidence.communication['parameters']:,} parameters): ZeRO-3 / "
            f"DDP volume per optimizer step measured {one['measured']:.3f} at accumulation 1 (stated "
            f"{result['stated']:g}, +-{result['tolerance']:.0%}); {later} (the paper's reading gives "
            f"{result['stated_at_claim_accumulation']:g})")
    if result["holds_at_accumulation_1"]:
        return Verdict(HOLDS_ONLY_WHEN, text, source,
                       condition=f"the model is this run's ({evidence.communication['parameters']:,} parameters)")
    named = ", ".join(t["name"] for t in result["departures"][:3])
    return Verdict(DOES_NOT_HOLD, text + (f"; the difference is DeepSpeed's: {named}" if named else ""), source)


def _gate_verdict(gate: dict[str, Any] | None, name: str, evidence: Evidence, unit: str) -> Verdict:
    source = f"gate {name} (gates/verdicts.json)"
    if gate is None:
        return Verdict(CANNOT_JUDGE, "the profile has no such gate", source, why=f"this profile has no gate {name}")
    measured = gate.get("measured")
    text = (f"{evidence.machine}, this profile's model: measured {'—' if measured is None else f'{measured:.4g}'} "
            f"{gate['unit']} {gate['comparison']} {gate['threshold']} {gate['unit']}: {gate['verdict']}")
    if gate["verdict"] == "PASS":
        reproduction = (evidence.gates or {}).get("reproduction") or {}
        if reproduction.get("faithful"):
            return Verdict(HOLDS, text, source)
        parameters = (evidence.ledger or {}).get("parameters")
        return Verdict(HOLDS_ONLY_WHEN, text + "; not a faithful reproduction: " + "; ".join(reproduction.get("reasons", [])),
                       source, condition=f"the model and machine are this run's ({evidence.machine}"
                                         + (f", {parameters:,} parameters" if parameters else "")
                                         + "), not the claim's 14B model on the claimed box")
    if gate["verdict"] == "FAIL":
        return Verdict(DOES_NOT_HOLD, text, source)
    return Verdict(CANNOT_JUDGE, text, source, why=gate.get("reason") or "the gate was not measured")


def judge_step_time(claim: dict[str, Any], evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    limit = claim["stated"]["value"]
    step, micro = plan["optimizer_step_floor(s)"], plan["micro_step_floor(s)"]
    source = _on_paper_source(evidence) + ", throughput floor"
    if step is None:
        paper = Verdict(CANNOT_JUDGE, "no floor", source,
                        why="the floor lacks figures: " + "; ".join(plan["floor"].get("missing", [])))
    else:
        text = f"optimizer-step floor {step:.3g} s, micro-step floor {micro:.3g} s, against {limit} s"
        if micro > limit:
            paper = Verdict(DOES_NOT_HOLD, text + ": even a micro-step cannot be that fast", source)
        elif step > limit:
            paper = Verdict(HOLDS_ONLY_WHEN, text, source,
                            condition=f"a step means a micro-step: an optimizer step cannot take under {step:.3g} s")
        else:
            paper = Verdict(CANNOT_JUDGE, text, source,
                            why=f"a floor is a lower bound: {step:.3g} s <= {limit} s does not exclude the claim")
    return paper, _gate_verdict(evidence.gate(claim["gate"]), claim["gate"], evidence, "s")


def judge_peak_memory(claim: dict[str, Any], evidence: Evidence) -> Judged:
    plan = evidence.claimed_plan
    stated, unit = claim["stated"]["value"], claim["stated"]["unit"]
    limit = stated * UNIT_BYTES[unit]
    other_unit = "GiB" if unit == "GB" else "GB"
    devices = [c for c in plan["checks"] if c["rank"] is not None]
    source = _on_paper_source(evidence) + ", memory checks"
    if not devices:
        return (Verdict(CANNOT_JUDGE, "no GPU in the plan", source, why="the claimed box's plan has no GPU"),
                _gate_verdict(evidence.gate(claim["gate"]), claim["gate"], evidence, unit))
    small = min(devices, key=lambda c: c["capacity(bytes)"])
    need = small["need(bytes)"]
    estimate = _scheme_row(plan, plan["scheme"])["deepspeed"]
    floor = None if estimate is None else estimate["device_per_rank(bytes)"]
    text = (f"rank {small['rank']} ({small['device']}): zerogate predicts {both_units(need)}"
            + ("" if floor is None else f", DeepSpeed's model-state estimate {both_units(floor)}")
            + f", against {stated} {unit} = {both_units(limit)}")
    if need < limit:
        paper = Verdict(HOLDS, text, source)
    elif need < stated * UNIT_BYTES[other_unit]:
        paper = Verdict(HOLDS_ONLY_WHEN, text, source, condition=f"'{unit}' is read as {other_unit}")
    else:
        paper = Verdict(DOES_NOT_HOLD, text, source)
    return paper, _gate_verdict(evidence.gate(claim["gate"]), claim["gate"], evidence, unit)


def judge_convergence(claim: dict[str, Any], evidence: Evidence) -> Judged:
    paper = Verdict(CANNOT_JUDGE, "a statement about a training run", "—",
                    why="convergence is measured, not predicted")
    gates = [(name, evidence.gate(name)) for name in claim["gates"]]
    source = "gates " + ", ".join(claim["gates"]) + " (gates/verdicts.json)"
    missing = [name for name, gate in gates if gate is None]
    if missing or not evidence.gates:
        return paper, Verdict(CANNOT_JUDGE, "—", source, why="this profile has no gate " + ", ".join(missing or claim["gates"]))
    steps = {}
    for _, gate in gates:
        steps.update(gate.get("evidence", {}).get("steps_per_rank") or {})
    ran = min(steps.values()) if steps else None
    text = "; ".join(f"{name}: {gate['verdict']} (measured {gate['measured']} {gate['unit']})" for name, gate in gates)
    text += f"; {ran if ran is not None else 'unknown'} optimizer steps per rank (claimed {claim['steps']})"
    verdicts = {gate["verdict"] for _, gate in gates}
    if "FAIL" in verdicts:
        return paper, Verdict(DOES_NOT_HOLD, text, source)
    if verdicts != {"PASS"}:
        return paper, Verdict(CANNOT_JUDGE, text, source, why="a gate was not measured")
    if ran is None or ran < claim["steps"]:
        return paper, Verdict(HOLDS_ONLY_WHEN, text, source,
                              condition=f"the run is {ran} steps long: {claim['steps']} were claimed, not run here")
    return paper, Verdict(HOLDS, text, source)


def judge_hardware(claim: dict[str, Any], evidence: Evidence) -> Judged:
    described = evidence.claimed_machine.get("gpus", [])
    notes, wrong = [], []
    for stated in claim["gpus"]:
        gpu = next((g for g in described if stated["name"] in g["name"]), None)
        if gpu is None:
            notes.append(f"{stated['name']}: not in the claimed box's description")
            wrong.append(stated["name"])
            continue
        actual = gpu["memory_total_bytes"]
        # Vendors' "GB" of GPU memory are binary (chips of 2^30 bytes), so the stated figure is compared in
        # both readings: it holds when either matches.
        matches = any(math.isclose(actual, stated["memory"] * UNIT_BYTES[u], rel_tol=0.05) for u in ("GB", "GiB"))
        notes.append(f"{gpu['name']}: {both_units(actual)} in the description (stated {stated['memory']} {stated['unit']})")
        if not matches:
            wrong.append(stated["name"])
    source = (f"the claimed box's description ({evidence.claimed_machine.get('name', '?')}: "
              f"{evidence.claimed_machine.get('description', '').strip()})")
    paper = Verdict(DOES_NOT_HOLD if wrong else HOLDS, "; ".join(notes), source)
    here = gpus_here(evidence.fingerprint)
    measured = Verdict(CANNOT_JUDGE, f"GPUs here: {', '.join(here) or 'none'}", "probe/hardware.json",
                       why=f"{evidence.machine} is not the claimed box")
    return paper, measured


def judge_not_tested(claim: dict[str, Any], evidence: Evidence) -> Judged:
    verdict = Verdict(CANNOT_JUDGE, "—", "—", why=claim["why"])
    return verdict, verdict


JUDGES: dict[str, Callable[[dict[str, Any], Evidence], Judged]] = {
    "arithmetic": judge_arithmetic,
    "ledger_formula": judge_ledger_formula,
    "offload_formula": judge_offload_formula,
    "communication": judge_communication,
    "step_time": judge_step_time,
    "peak_memory": judge_peak_memory,
    "convergence": judge_convergence,
    "hardware": judge_hardware,
    "not_tested": judge_not_tested,
}


def judge(claims: dict[str, Any], evidence: Evidence) -> dict[str, Any]:
    """Every claim of config/claims.yaml judged: claims/verdicts.json."""
    judged = []
    for claim in claims["claims"]:
        paper, measured = JUDGES[claim["kind"]](claim, evidence)
        judged.append({"id": claim["id"], "statement": claim["statement"], "kind": claim["kind"],
                       "on_paper": paper.as_dict(), "measured_here": measured.as_dict()})
    return {
        "claimed_box": {**claims["claimed_box"], "machine_name": evidence.claimed_plan["machine"]},
        "machine": evidence.machine,
        "vocabulary": list(VERDICTS),
        "claims": judged,
    }
