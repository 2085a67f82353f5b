"""Claims judged on paper: a memory or step-time claim against a plan (zerogate.contracts.plan.Plan), in the
one claim vocabulary (zerogate.contracts.verdicts). The plan's text (plan/plan.txt), the profile's claims on
paper (plan/claims.json) and the seed's claims (claims/verdicts.json, the report) all judge with these."""

from __future__ import annotations

from zerogate.config.judging import GateSettings
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import column
from zerogate.contracts.verdicts import (
    CANNOT_JUDGE,
    DOES_NOT_HOLD,
    HOLDS,
    HOLDS_ONLY_WHEN,
    ClaimVerdict,
    PlanClaim,
    PlanClaims,
)
from zerogate.predict.phases import ACTIVATION_TERMS
from zerogate.units import UNIT_BYTES, format_bytes


def plan_source(plan: Plan) -> str:
    return f"plan of {plan.machine} ({plan.machine_source})"


def judge_fit(plan: Plan) -> ClaimVerdict:
    """The run can be held by the machine: every memory check has headroom."""
    failing = [c for c in plan.checks if not c.fits]
    text = (
        "; ".join(
            f"{c.device} {c.what}: needs {format_bytes(c.need_bytes)}, capacity "
            f"{format_bytes(c.capacity_bytes)}"
            for c in failing
        )
        or "every check has headroom"
    )
    return ClaimVerdict(verdict=DOES_NOT_HOLD if failing else HOLDS, evidence=text, source=plan_source(plan))


def device_terms_text(plan: Plan) -> str:
    """The run's device terms as the plan holds them: the activations as traced (per layer x layers + outside
    the layers, and the backward's transient), the formula's figure beside them, the largest other terms and
    the levels (tensor, allocator, device)."""
    own, activations = plan.ledger.own.zerogate, plan.ledger.activations
    if activations.per_layer_bytes is not None and activations.outside_layers_bytes is not None:
        shape = (
            f"{format_bytes(activations.per_layer_bytes)} per layer x {activations.layers} layers + "
            f"{format_bytes(activations.outside_layers_bytes)} outside the layers"
        )
    else:
        shape = f"all {activations.layers} layers {activations.basis}"
    text = (
        f"activations {activations.basis} {format_bytes(activations.saved_bytes)} ({shape}), backward "
        "transient "
        f"{format_bytes(activations.backward_transient_bytes)} (the Korthikanti formula: "
        f"{format_bytes(activations.formula_bytes)})"
    )
    others = sorted(
        ((k, v) for k, v in own.device_terms_bytes.items() if k not in ACTIVATION_TERMS and v),
        key=lambda kv: -kv[1],
    )
    text += "; " + ", ".join(f"{k} {format_bytes(v)}" for k, v in others[:6])
    return (
        text + f"; tensor peak {format_bytes(own.device_tensor_peak_per_rank_bytes)}, allocator "
        f"{format_bytes(own.device_allocator_peak_per_rank_bytes)}, device "
        f"{format_bytes(own.device_per_rank_bytes)}"
    )


def changes_under(plan: Plan, limit: float) -> list[str]:
    """Each of the plan's device changes that brings the smallest device under ``limit`` bytes, with the
    one command that plans it."""
    found = []
    for change in plan.device_changes:
        need = change.smallest_device_need_bytes
        if need is not None and need < limit:
            how = f"; plan it: {change.command}" if change.command else ""
            found.append(
                f"{change.change} (needs {format_bytes(need)}"
                + ("" if change.fits else ", but the run still does not fit the machine")
                + how
                + ")"
            )
    return found


def judge_memory(plan: Plan, threshold: float, unit: str) -> ClaimVerdict:
    """A peak-memory claim for the smallest device: zerogate's predicted need and its interval (the terms'
    own uncertainty, zerogate.predict.fit) against the threshold, read in the claim's unit, else in the
    other (GB as 10^9 or 2^30 bytes), DeepSpeed's own model-state estimate beside it, the traced terms it is
    made of, and the changes that would bring the need under it. Holds when the whole interval is under the
    threshold, does not hold when all of it is above in either reading, cannot be judged when the
    threshold lies inside it."""
    source = plan_source(plan) + ", memory checks"
    small = plan.smallest_device
    if small is None:
        return ClaimVerdict(
            verdict=CANNOT_JUDGE,
            evidence="no GPU in the plan",
            source=source,
            why=f"the plan of {plan.machine} has no GPU",
        )
    limit = threshold * UNIT_BYTES[unit]
    other_unit = "GiB" if unit == "GB" else "GB"
    other_limit = threshold * UNIT_BYTES[other_unit]
    low = small.need_bytes if small.need_low_bytes is None else small.need_low_bytes
    high = small.need_bytes if small.need_high_bytes is None else small.need_high_bytes
    estimate = plan.ledger.own.deepspeed
    floor = None if estimate is None else estimate.device_per_rank_bytes
    text = (
        f"rank {small.rank} ({small.device}): zerogate predicts {format_bytes(small.need_bytes)}"
        + ("" if low == high else f" (between {format_bytes(low)} and {format_bytes(high)})")
        + ("" if floor is None else f", DeepSpeed's model-state estimate {format_bytes(floor)}")
        + f", against {threshold:g} {unit} = {format_bytes(limit)}; {device_terms_text(plan)}"
    )
    if high < limit:
        return ClaimVerdict(verdict=HOLDS, evidence=text, source=source)
    under = changes_under(plan, limit)
    if under:
        text += "; under it with: " + "; ".join(under)
    if high < other_limit:
        return ClaimVerdict(
            verdict=HOLDS_ONLY_WHEN,
            evidence=text,
            source=source,
            condition=f"'{unit}' is read as {other_unit}",
        )
    if low < max(limit, other_limit):
        return ClaimVerdict(
            verdict=CANNOT_JUDGE,
            evidence=text,
            source=source,
            why="the claim lies inside the predicted interval",
        )
    if floor is not None and floor >= limit:
        text += "; DeepSpeed's model-state estimate alone is above it"
    return ClaimVerdict(verdict=DOES_NOT_HOLD, evidence=text, source=source)


def predicted_text(plan: Plan) -> str:
    """The plan's predicted optimizer step in words (zerogate.predict.step_time), "" when it has none."""
    step = plan.step_time
    if step is None or step.low_s is None or step.high_s is None:
        return ""
    return (
        f"predicted optimizer step {step.low_s:.3g} to {step.high_s:.3g} s (decided by {step.deciding_term})"
    )


def judge_step_time_predicted(plan: Plan, threshold: float) -> ClaimVerdict:
    """A step-time claim against the plan's predicted interval (zerogate.predict.step_time): holds when the
    whole interval is at or below the claim, does not hold when all of it is above, cannot be judged when the
    claim lies inside it or the prediction lacks figures. A prediction, not a bound: the floor's verdict
    (judge_step_time) is the proof."""
    source = plan_source(plan) + ", predicted step time"
    step = plan.step_time
    if step is None or step.low_s is None or step.high_s is None:
        return ClaimVerdict(
            verdict=CANNOT_JUDGE, evidence="no prediction", source=source, why="no prediction"
        )
    text = predicted_text(plan) + f", against {threshold:g} s"
    if step.missing:
        text += f"; without a figure, so too low: {'; '.join(step.missing)}"
    if step.low_s > threshold:
        return ClaimVerdict(
            verdict=DOES_NOT_HOLD, evidence=text + ": all of it above the claim", source=source
        )
    if step.high_s <= threshold and not step.missing:
        return ClaimVerdict(verdict=HOLDS, evidence=text + ": all of it at or below the claim", source=source)
    return ClaimVerdict(
        verdict=CANNOT_JUDGE,
        evidence=text,
        source=source,
        why="the claim lies inside the predicted interval"
        if step.low_s <= threshold < step.high_s
        else "terms without a figure could lift the interval above the claim",
    )


def judge_step_time(plan: Plan, threshold: float) -> ClaimVerdict:
    """A step-time claim against the plan's floor: a floor above the claim rules it out; a floor below it
    cannot confirm it (a floor is a lower bound). The evidence names the predicted step beside the floor
    (judge_step_time_predicted judges the claim against it)."""
    source = plan_source(plan) + ", throughput floor"
    step, micro = plan.floor.optimizer_step_floor_s, plan.floor.micro_step_floor_s
    if step is None or micro is None:
        return ClaimVerdict(
            verdict=CANNOT_JUDGE,
            evidence="no floor",
            source=source,
            why="the floor lacks figures: " + "; ".join(plan.floor.missing),
        )
    predicted = predicted_text(plan)
    text = f"optimizer-step floor {step:.3g} s, micro-step floor {micro:.3g} s" + (
        f" ({predicted})" if predicted else ""
    )
    text += f", against {threshold:g} s"
    if micro > threshold:
        return ClaimVerdict(
            verdict=DOES_NOT_HOLD, evidence=text + ": even a micro-step cannot be that fast", source=source
        )
    if step > threshold:
        return ClaimVerdict(
            verdict=HOLDS_ONLY_WHEN,
            evidence=text,
            source=source,
            condition=f"a step means a micro-step: an optimizer step cannot take under {step:.3g} s",
        )
    return ClaimVerdict(
        verdict=CANNOT_JUDGE,
        evidence=text,
        source=source,
        why=f"a floor is a lower bound: {step:.3g} s <= {threshold:g} s does not exclude the claim",
    )


def judge_gate(gate: GateSettings, plan: Plan) -> ClaimVerdict | None:
    """A profile gate's claim on paper, for the gates a plan can speak to (memory and step time)."""
    if gate.metric.startswith("memory/") and gate.unit in UNIT_BYTES and plan.device_checks:
        return judge_memory(plan, gate.threshold, gate.unit)
    if gate.metric == column("step_time_s") and gate.unit == "s" and gate.statistic in ("median", "p90"):
        return judge_step_time(plan, gate.threshold)
    return None


def plan_claims(plan: Plan, gates: tuple[GateSettings, ...]) -> PlanClaims:
    """The run's fit, then each of the profile's gates a plan can speak to, judged on paper."""
    claims = [
        PlanClaim(
            gate="run_fits_machine",
            claim="the profile's run can be held by this machine",
            verdict=judge_fit(plan),
        )
    ]
    for gate in gates:
        verdict = judge_gate(gate, plan)
        if verdict is not None:
            claims.append(PlanClaim(gate=gate.name, claim=gate.claim, verdict=verdict))
        if verdict is not None and verdict.source.endswith("throughput floor"):
            claims.append(
                PlanClaim(
                    gate=f"{gate.name} (predicted)",
                    claim=f"{gate.claim} (against the predicted step time)",
                    verdict=judge_step_time_predicted(plan, gate.threshold),
                )
            )
    return PlanClaims(machine=plan.machine, claims=claims)
