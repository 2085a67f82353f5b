"""A plan in words: the human-readable summary (``plan/plan.txt``) and the refusal message approve_plan
prints. Reads the plan contract only, so the light rules that print a plan load no model or DeepSpeed."""

from __future__ import annotations

from zerogate.contracts.machine import Figure
from zerogate.contracts.plan import Floor, Ledger, MemoryCheck, Plan
from zerogate.predict.step_time_text import change_step, time_lines
from zerogate.units import format_bytes


def _rank(check: MemoryCheck) -> str:
    return f"rank {check.rank} " if check.rank is not None else ""


def _need(check: MemoryCheck) -> str:
    """A check's need: its point figure and, where it has one, its interval."""
    text = format_bytes(check.need_bytes)
    low, high = check.need_low_bytes, check.need_high_bytes
    if low is None or high is None or low == high:
        return text
    return f"{text} (between {format_bytes(low)} and {format_bytes(high)})"


def _verdict(check: MemoryCheck) -> str:
    """A check's verdict in words: the three-valued one where the plan has it, else fits or not."""
    if check.verdict is not None:
        return check.verdict.upper() if check.verdict != "fits" else "fits"
    return "fits" if check.fits else "DOES NOT FIT"


def may_not_fit_warning(result: Plan) -> str | None:
    """What approve_plan logs when it approves a run whose need's interval holds a device's or the host's
    capacity: the run is not refused (its point need fits), but it may run out of memory."""
    if result.verdict != "may not fit" or result.refused:
        return None
    lines = ["the plan's point need fits, but the interval of its terms reaches past a capacity:"]
    lines += [
        f"  {_rank(c)}{c.device}: {c.what} needs {_need(c)}, capacity {format_bytes(c.capacity_bytes)}"
        for c in result.checks
        if c.verdict == "may not fit"
    ]
    return "\n".join(
        lines + ["the run may run out of memory; it is approved (only a point need past it refuses)"]
    )


def largest_micro_batch_text(result: Plan) -> str:
    """The largest micro-batch per rank: "fits up to N, may fit up to M", with the point figure's beside."""
    point = result.largest_micro_batch_per_rank or "none"
    if (
        result.largest_micro_batch_fits_per_rank is None
        or result.largest_micro_batch_may_fit_per_rank is None
    ):
        return f"largest micro-batch per rank that fits: {point}"
    fits = result.largest_micro_batch_fits_per_rank or "none"
    may = result.largest_micro_batch_may_fit_per_rank or "none"
    return (
        f"largest micro-batch per rank: fits up to {fits}, may fit up to {may} (the point need fits up to "
        f"{point})"
    )


def refusal(result: Plan) -> str:
    """The refusal message: each failing check with rank, device, need and capacity; what would fit."""
    lines = [f"plan refused: the {result.scheme} run of {result.ranks} ranks does not fit {result.machine}:"]
    for check in result.checks:
        if not check.fits:
            lines.append(
                f"  {_rank(check)}{check.device}: {check.what} needs {_need(check)}, "
                f"capacity {format_bytes(check.capacity_bytes)}"
            )
    if result.suggestions:
        lines.append("changes that would fit:")
        lines += [
            f"  - {s.change} ({s.tightest}: {format_bytes(s.need_bytes)} of {format_bytes(s.capacity_bytes)})"
            + (f"; plan it: {s.command}" if s.command else "")
            for s in result.suggestions
        ]
    else:
        lines.append(
            "no single change considered (offload, micro-batch 1, activation checkpointing, 2-8x ranks) fits"
        )
    lines.append(
        "to train anyway, set `plan: {allow_infeasible: true, reason: ...}` in the profile (recorded as a "
        "deviation)"
    )
    return "\n".join(lines)


def scheme_lines(led: Ledger) -> list[str]:
    """Per-rank device memory of every scheme: the paper's, DeepSpeed's estimator's and zerogate's."""
    lines = []
    for scheme, row in led.schemes.items():
        ds, zg = row.deepspeed, row.zerogate
        lines.append(
            f"  {scheme:<24} paper {format_bytes(row.paper.device_per_rank_bytes)} | "
            f"DeepSpeed {format_bytes(ds and ds.device_per_rank_bytes)}, host "
            f"{format_bytes(ds and ds.host_per_node_bytes)} | "
            f"zerogate {format_bytes(zg.device_per_rank_bytes)} "
            f"({'with' if not led.activation_checkpointing else 'without'} "
            f"checkpointing {format_bytes(zg.device_per_rank_other_checkpointing_bytes)}), host "
            f"{format_bytes(zg.host_per_node_bytes)}"
        )
    return lines


def activation_line(led: Ledger) -> str:
    """The run's activations, how they were found, and the formula's figure beside them."""
    acts = led.activations
    shape = (
        f"{format_bytes(acts.per_layer_bytes)} per layer x {acts.layers} layers + "
        f"{format_bytes(acts.outside_layers_bytes)} outside"
        if acts.per_layer_bytes is not None and acts.outside_layers_bytes is not None
        else f"{acts.layers} layers"
    )
    after = (
        ""
        if acts.at_first_gradient_bytes is None
        else f", alive at the first accumulated gradient {format_bytes(acts.at_first_gradient_bytes)} and "
        f"the backward's peak after it {format_bytes(acts.after_first_gradient_bytes)} more"
    )
    return (
        f"activations ({acts.basis}; micro-batch {led.micro_batch}, sequence {led.seq_len}, "
        f"{led.attention} attention, checkpointing {'on' if led.activation_checkpointing else 'off'}): "
        f"{format_bytes(acts.saved_bytes)} ({shape}), backward transient "
        f"{format_bytes(acts.backward_transient_bytes)}{after}; the Korthikanti formula "
        f"{format_bytes(acts.formula_bytes)}"
    )


def ledger_lines(result: Plan) -> list[str]:
    """The machine, the model and the ledger: every scheme, the activations and this run's device terms."""
    led = result.ledger
    own = led.own.zerogate
    return [
        f"machine {result.machine} ({result.machine_source}); {led.parameters:,} parameters "
        f"(largest layer {led.largest_layer_parameters:,}); {result.ranks} ranks, {result.dtype}; "
        f"this run: {result.scheme}",
        "per-rank device memory (paper | DeepSpeed estimator | zerogate incl. activations; host per node):",
        *scheme_lines(led),
        activation_line(led),
        "this run's device terms per rank: "
        + ", ".join(f"{k} {format_bytes(v)}" for k, v in own.device_terms_bytes.items())
        + f"; tensor peak {format_bytes(own.device_tensor_peak_per_rank_bytes)}, allocator "
        f"{format_bytes(own.device_allocator_peak_per_rank_bytes)}, device "
        f"{format_bytes(own.device_per_rank_bytes)}{_range(own.device_per_rank_range_bytes)}; host per node "
        f"{format_bytes(own.host_per_node_bytes)}{_range(own.host_per_node_range_bytes)}",
    ]


def _range(bounds: list[int] | None) -> str:
    """A figure's interval in words, where it has one wider than a point."""
    if not bounds or bounds[0] == bounds[1]:
        return ""
    return f" (between {format_bytes(bounds[0])} and {format_bytes(bounds[1])})"


def fit_lines(result: Plan) -> list[str]:
    """Each check with its headroom, the notes, the largest micro-batch, and the changes that would fit or
    lower the device need."""
    verdict = f": {result.verdict.upper() if result.verdict != 'fits' else 'fits'}" if result.verdict else ""
    lines = [
        f"fit of this run{verdict} (fits: the need's interval within the capacity; may not fit: the "
        "capacity inside it; does not fit: above it):"
    ]
    for check in result.checks:
        lines.append(
            f"  {_verdict(check)}: {_rank(check)}{check.device} {check.what}: need "
            f"{_need(check)}, capacity {format_bytes(check.capacity_bytes)}, headroom "
            f"{format_bytes(check.headroom_bytes)}"
        )
    if result.pinned_memory:
        lines.append(f"  note: {result.pinned_memory}")
    lines += [f"  note: {note}" for note in result.notes]
    lines.append(largest_micro_batch_text(result))
    if not result.fits:
        lines.append("changes that would fit:" + ("" if result.suggestions else " none of those considered"))
        lines += [
            f"  - {s.change}" + change_step(s, " (", ")") + (f": {s.command}" if s.command else "")
            for s in result.suggestions
        ]
    if result.host_changes:
        lines.append(
            "changes that lower the host need (host, smallest device and NVMe after each; the step left):"
        )
        lines += [
            f"  - {s.change}: host {format_bytes(s.host_need_bytes)}, device "
            f"{format_bytes(s.smallest_device_need_bytes)}"
            + (f", NVMe {format_bytes(s.nvme_need_bytes)}" if s.nvme_need_bytes else "")
            + change_step(s, ", ")
            + ("" if s.fits else " (the run still does not fit)")
            + (f": {s.command}" if s.command else "")
            for s in result.host_changes
        ]
    if result.time_changes:
        lines.append(
            "changes that keep the run fitting and change its step (the step left; the need after each):"
        )
        lines += [
            f"  - {s.change}:" + change_step(s, " ") + f"; tightest {s.tightest}, needs "
            f"{format_bytes(s.need_bytes)} of {format_bytes(s.capacity_bytes)}"
            + (f": {s.command}" if s.command else "")
            for s in result.time_changes
        ]
    if result.device_changes:
        lines.append("changes that lower the device need (smallest device after each; the step left):")
        lines += [
            f"  - {s.change}: {format_bytes(s.smallest_device_need_bytes)}"
            + change_step(s, ", ")
            + ("" if s.fits else " (the run still does not fit)")
            + (f": {s.command}" if s.command else "")
            for s in result.device_changes
        ]
    return lines


def _seconds(value: float | None, digits: str = ".3f") -> str:
    return "n/a" if value is None else f"{value:{digits}}"


def floor_lines(steps: Floor) -> list[str]:
    """The throughput floor: micro-step and optimizer step, each rank's terms, the optimizer update's and
    the collectives'."""
    micro, step = steps.micro_step_floor_s, steps.optimizer_step_floor_s
    lines = [
        f"throughput floor: micro-step {'n/a' if micro is None else f'{micro:.3f} s'}, optimizer step "
        f"{'n/a' if step is None else f'{step:.3f} s'}"
        + (f" (left out: {'; '.join(steps.missing)})" if steps.missing else "")
    ]
    for rank in steps.ranks:
        terms = ", ".join(f"{k} {_seconds(v)}" for k, v in rank.terms.items())
        lines.append(f"  rank {rank.rank} {rank.device}: {terms}")
        if rank.peak_source:
            lines.append(f"    peak: {rank.peak_source}")
    for k, v in steps.optimizer_terms.items():
        lines.append(f"  optimizer update: {k} {_seconds(v)}")
    return lines + collective_lines(steps)


def peer_lines(result: Plan) -> list[str]:
    """ZeRO-3's peers on the machine: whether each fits, its needs and what it communicates."""
    if not result.peers:
        return []
    lines = ["ZeRO-3's peers on this machine (the same model, batch, precision and ranks):"]
    for peer in result.peers:
        needs = "; ".join(
            f"{_rank(c)}{c.device} {_need(c)} of {format_bytes(c.capacity_bytes)}" for c in peer.checks
        )
        lines.append(
            f"  {peer.variant}: {'fits' if peer.fits else 'DOES NOT FIT'} ({needs}); communicates "
            f"{format_bytes(peer.communicated_per_step_bytes)} per rank and optimizer step"
            + (f" ({peer.note})" if peer.note else "")
        )
    return lines


def summary(result: Plan, claims: list[tuple[str, str]] | None = None) -> str:
    """The human-readable plan: per-rank memory of every scheme, the floor, where the time goes, and
    ``claims`` (name, verdict text) as zerogate.analysis.on_paper judged them."""
    lines = ledger_lines(result) + fit_lines(result) + floor_lines(result.floor)
    lines += time_lines(result.step_time, result.floor) + peer_lines(result)
    if claims:
        lines.append("claims, on paper:")
        lines += [f"  {name}: {text}" for name, text in claims]
    return "\n".join(lines)


def _figure(fig: Figure | None, unit: str, scale: float = 1.0) -> str:
    if fig is None:
        return "n/a (missing)"
    high = "" if fig.high is None else f" to {fig.high * scale:.4g}"
    low = "" if fig.low is None else f" (slowest repeat {fig.low * scale:.4g})"
    return f"{fig.value * scale:.4g}{high}{low} {unit} ({fig.basis}: {fig.source})"


def collective_lines(steps: Floor) -> list[str]:
    """The floor's collective terms as the plan prints them: per micro-step and per boundary, each kind's
    calls x latency + volume / bandwidth, every figure with its basis and source."""
    communication = steps.communication
    lines = [
        f"  collectives ({communication.scheme}, {communication.world} ranks, "
        f"{communication.backend or 'backend n/a'}, {communication.route or 'route n/a'}):"
    ]
    for part, label in (
        (communication.micro_step, "per micro-step"),
        (communication.boundary, "per boundary"),
    ):
        total = "n/a" if part.seconds is None else f"{part.seconds:.4g} s"
        lines.append(f"    {label}: {total}" + ("" if part.kinds else " (no collectives)"))
        for kind, row in part.kinds.items():
            latency = "n/a" if row.latency_time_s is None else f"{row.latency_time_s:.4g} s"
            transfer = "n/a" if row.transfer_time_s is None else f"{row.transfer_time_s:.4g} s"
            lines.append(
                f"      {kind}: {row.calls:g} calls x latency = {latency}; {row.volume_bytes:.4g} B / "
                f"bandwidth = {transfer}"
            )
            lines.append(f"        latency {_figure(row.latency, 'ms', 1e3)}")
            lines.append(f"        bandwidth {_figure(row.bandwidth, 'GB/s')}")
    return lines
