"""The planner: the ledger and the floor against a machine. Does the run fit, per rank and per host, and
what would make it fit? Refuses an infeasible run before training starts (approve_plan). Judging the
profile's claims against a plan is zerogate.analysis.on_paper's: the plan holds the figures, not verdicts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from zerogate.config.launch import PlanSettings
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.plan import (
    Floor,
    Ledger,
    MemoryCheck,
    ModelComputeMeasurement,
    PeakPrediction,
    PeerPlan,
    Plan,
    SuggestedSettings,
    Suggestion,
)
from zerogate.contracts.records import column
from zerogate.contracts.run import Deviation, DsConfig, RunSpec
from zerogate.hardware import cuda_capacity
from zerogate.model.counts import ModelCounts
from zerogate.predict.floor import floor
from zerogate.predict.ledger import Activations, device_levels, host_need_per_rank, ledger, zerogate_terms
from zerogate.predict.setup import Setup
from zerogate.units import format_bytes


def _check(what: str, rank: int | None, device: str, need: int, capacity: int) -> MemoryCheck:
    return MemoryCheck(
        what=what,
        rank=rank,
        device=device,
        need_bytes=need,
        capacity_bytes=capacity,
        headroom_bytes=capacity - need,
        fits=capacity - need >= 0,
    )


def device_capacity(gpu: dict[str, Any], machine: dict[str, Any]) -> int:
    """The device memory a rank's allocations can reach on ``gpu``. A probed machine's is what CUDA reported
    there (zerogate.runtime.probe). A described machine states a card's memory as its maker does, the chips'
    capacity, of which the driver keeps some: there it is the CUDA capacity published for the card model
    (zerogate.hardware.CUDA_CAPACITY) where the table has it and it is less."""
    stated = int(gpu["memory_total_bytes"])
    known = cuda_capacity(gpu["name"]) if machine.get("source") == "described" else None
    return stated if known is None else min(stated, known.bytes)


def device_and_host_checks(
    setup: Setup, machine: dict[str, Any], device_need: int, host_per_rank: int
) -> list[MemoryCheck]:
    """One check per rank's device (GPUs: every rank needs ``device_need`` of its GPU's device_capacity, its
    GPU the machine's in rank order) and one for the node's host RAM (``host_per_rank`` x the ranks on a
    node)."""
    gpus = machine.get("gpus", [])
    result = (
        [
            _check(
                "device memory",
                rank,
                gpus[rank % len(gpus)]["name"],
                device_need,
                device_capacity(gpus[rank % len(gpus)], machine),
            )
            for rank in range(setup.ranks)
        ]
        if gpus
        else []
    )
    result.append(
        _check(
            "host RAM",
            None,
            "host (all ranks of the node)",
            host_per_rank * setup.ranks_per_node,
            machine["host"]["ram_total_bytes"],
        )
    )
    return result


def checks(
    counts: ModelCounts, setup: Setup, machine: dict[str, Any], activations: Activations | None = None
) -> list[MemoryCheck]:
    """One check per rank's device (GPUs), one for host RAM, and one for NVMe where the run swaps to NVMe
    and the machine states its capacity, each with headroom."""
    gpus = machine.get("gpus", [])
    terms = zerogate_terms(counts, setup, activations)
    result = device_and_host_checks(
        setup, machine, device_levels(terms["device"])["device"], host_need_per_rank(terms, not gpus)
    )
    nvme = sum(terms["nvme"].values()) * setup.ranks_per_node
    capacity = machine["host"].get("nvme_bytes")
    if nvme and capacity is not None:
        result.append(_check("NVMe", None, "NVMe swap space of the node", nvme, capacity))
    return result


def notes(
    counts: ModelCounts, setup: Setup, machine: dict[str, Any], activations: Activations | None = None
) -> list[str]:
    """What the checks could not judge."""
    nvme = sum(zerogate_terms(counts, setup, activations)["nvme"].values()) * setup.ranks_per_node
    if nvme and machine["host"].get("nvme_bytes") is None:
        return [
            f"the run swaps {format_bytes(nvme)} per node to NVMe; the machine states no NVMe capacity "
            f"(host.nvme_bytes), so that is not checked"
        ]
    return []


def largest_micro_batch(
    counts: ModelCounts,
    setup: Setup,
    machine: dict[str, Any],
    activations: Activations | None = None,
    limit: int = 4096,
) -> int:
    """The largest micro-batch per rank with which every check fits, the rest of ``setup`` unchanged; 0 when
    not even one does. Doubling, then bisection: each candidate's activations are traced (or the formula's),
    and a larger micro-batch never needs less memory."""

    def fits(micro_batch: int) -> bool:
        return all(
            c.fits
            for c in checks(counts, dataclasses.replace(setup, micro_batch=micro_batch), machine, activations)
        )

    return largest_accepted(fits, limit)


def largest_accepted(fits_at: Callable[[int], bool], limit: int) -> int:
    """The largest micro-batch up to ``limit`` that ``fits_at`` accepts (0: not even 1), assuming fit only
    shrinks as it grows: doubling to the first that does not fit, then bisection."""
    if not fits_at(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits_at(high):
        low, high = high, high * 2
    if high > limit:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits_at(middle) else (low, middle)
    return low


def pinned_note(counts: ModelCounts, setup: Setup, machine: dict[str, Any]) -> str | None:
    """Pinned host memory against RLIMIT_MEMLOCK: advice, not a refusal (CUDA's pinned allocations are
    made by the driver and need not count against the limit; mlock-based pinning does)."""
    limit = machine["host"].get("pinned_memory_limit_bytes")
    if not setup.pin_memory or not machine.get("gpus"):
        return None
    pinned = sum(zerogate_terms(counts, setup)["pinned"].values()) * max(1, setup.ranks // setup.nodes)
    if limit is not None and pinned > limit:
        return (
            f"pinned host memory {format_bytes(pinned)} exceeds RLIMIT_MEMLOCK {format_bytes(limit)}: if "
            "pinning "
            f"fails, raise the limit (ulimit -l) or set pin_memory false"
        )
    return f"pinned host memory {format_bytes(pinned)}" + (
        " (RLIMIT_MEMLOCK unlimited)" if limit is None else ""
    )


def _variants(setup: Setup) -> list[tuple[str, Setup]]:
    """Changes a user could make, each alone and the strongest combined."""
    options: list[tuple[str, Setup]] = []
    if setup.scheme != "zero3_offload_optimizer" and not setup.offload_param:
        options.append(("ZeRO-3 with optimizer offload to CPU", setup.with_scheme("zero3_offload_optimizer")))
    if setup.scheme != "zero3_offload_all":
        options.append(
            ("ZeRO-3 with optimizer and parameter offload to CPU", setup.with_scheme("zero3_offload_all"))
        )
    if setup.micro_batch > 1:
        options.append(
            (
                f"micro-batch 1 instead of {setup.micro_batch} (accumulation x{setup.micro_batch} keeps the "
                "batch)",
                dataclasses.replace(
                    setup, micro_batch=1, accumulation=setup.accumulation * setup.micro_batch
                ),
            )
        )
    if not setup.activation_checkpointing:
        options.append(
            ("activation checkpointing", dataclasses.replace(setup, activation_checkpointing=True))
        )
    for factor in (2, 4, 8):
        if setup.seq_len // factor >= 64:
            shorter = setup.seq_len // factor
            options.append(
                (
                    f"sequence length {shorter} instead of {setup.seq_len}",
                    dataclasses.replace(setup, seq_len=shorter),
                )
            )
    for factor in (2, 4, 8):
        options.append(
            (
                f"{setup.ranks * factor} ranks ({setup.nodes * factor} nodes like this one)",
                dataclasses.replace(setup, ranks=setup.ranks * factor, nodes=setup.nodes * factor),
            )
        )
    strongest = dataclasses.replace(
        setup.with_scheme("zero3_offload_all"), micro_batch=1, activation_checkpointing=True
    )
    options.append(("all of: full offload, micro-batch 1, activation checkpointing", strongest))
    for factor in (2, 4, 8):
        options.append(
            (
                f"all of: full offload, micro-batch 1, activation checkpointing, {setup.ranks * factor} "
                "ranks "
                f"({setup.nodes * factor} nodes like this one)",
                dataclasses.replace(strongest, ranks=setup.ranks * factor, nodes=setup.nodes * factor),
            )
        )
    return options


def suggestions(
    counts: ModelCounts, setup: Setup, machine: dict[str, Any], activations: Activations | None = None
) -> list[Suggestion]:
    """The changes that would make the run fit, with the need they leave on the tightest check. Of the
    shorter sequence lengths only the longest that fits is offered."""
    found = []
    shorter_found = False
    for change, variant in _variants(setup):
        if variant.seq_len != setup.seq_len and shorter_found:
            continue
        result = checks(counts, variant, machine, activations)
        if all(c.fits for c in result):
            shorter_found |= variant.seq_len != setup.seq_len
            found.append(_suggestion(change, setup, variant, result))
    return found


def _suggestion(change: str, setup: Setup, variant: Setup, result: list[MemoryCheck]) -> Suggestion:
    tightest = min(result, key=lambda c: c.headroom_bytes)
    devices = [c for c in result if c.rank is not None]
    smallest = min(devices, key=lambda c: c.capacity_bytes) if devices else None
    return Suggestion(
        change=change,
        tightest=tightest.what,
        need_bytes=tightest.need_bytes,
        capacity_bytes=tightest.capacity_bytes,
        # The same change as settings (plan.overlay writes a runnable profile from them).
        settings=SuggestedSettings(
            nodes=variant.nodes,
            ranks=variant.ranks,
            micro_batch=variant.micro_batch,
            accumulation=variant.accumulation,
            offload_optimizer=variant.offload_optimizer,
            offload_param=variant.offload_param,
            activation_checkpointing=variant.activation_checkpointing,
            seq_len=variant.seq_len if variant.seq_len != setup.seq_len else None,
        ),
        fits=all(c.fits for c in result),
        smallest_device_need_bytes=None if smallest is None else smallest.need_bytes,
    )


def device_changes(
    counts: ModelCounts, setup: Setup, machine: dict[str, Any], activations: Activations | None = None
) -> list[Suggestion]:
    """The changes a profile expresses that lower a device's need, each with the smallest device's need after
    it, whether or not the run then fits: activation checkpointing, a sequence of 1/2, 1/4, 1/8 the length
    (at least 64), micro-batch 1 with the accumulation keeping the batch, and checkpointing with each shorter
    sequence. Empty without GPUs."""
    if not machine.get("gpus"):
        return []
    options: list[tuple[str, Setup]] = []
    checkpointed = (
        setup if setup.activation_checkpointing else dataclasses.replace(setup, activation_checkpointing=True)
    )
    if not setup.activation_checkpointing:
        options.append(("activation checkpointing", checkpointed))
    if setup.micro_batch > 1:
        options.append(
            (
                f"micro-batch 1 instead of {setup.micro_batch} (accumulation x{setup.micro_batch} keeps the "
                "batch)",
                dataclasses.replace(
                    setup, micro_batch=1, accumulation=setup.accumulation * setup.micro_batch
                ),
            )
        )
    for factor in (2, 4, 8):
        shorter = setup.seq_len // factor
        if shorter >= 64:
            options.append(
                (
                    f"sequence length {shorter} instead of {setup.seq_len}",
                    dataclasses.replace(setup, seq_len=shorter),
                )
            )
            if not setup.activation_checkpointing:
                options.append(
                    (
                        f"activation checkpointing and sequence length {shorter} instead of {setup.seq_len}",
                        dataclasses.replace(checkpointed, seq_len=shorter),
                    )
                )
    return [
        _suggestion(change, setup, variant, checks(counts, variant, machine, activations))
        for change, variant in options
    ]


def peer_plans(
    counts: ModelCounts, setup: Setup, machine: dict[str, Any], activations: Activations | None = None
) -> list[PeerPlan]:
    """ZeRO-3's peers (FSDP2 without and with CPUOffloadPolicy) on ``machine`` with the run's model, batch,
    precision and ranks: each rank's device need, the host's, whether both fit, and one rank's communication
    per optimizer step. The sizes hold for fp16 as for bf16 (two bytes); zerogate's FSDP2 engine trains fp32
    or bf16 (fp16 needs torch's ShardedGradScaler, which it does not run), which the note says."""
    from zerogate.predict.comms_terms import step_totals
    from zerogate.predict.fsdp2_comms import fsdp2_theory
    from zerogate.predict.ledger import fsdp2_host_need_per_rank, fsdp2_terms
    from zerogate.render.variants import PEERS

    gpus = machine.get("gpus", [])
    found = []
    for name in ("fsdp2", "fsdp2-offload"):
        offload = name == "fsdp2-offload"
        peer = dataclasses.replace(setup, stage=3, offload_optimizer=offload, offload_param=offload)
        terms = fsdp2_terms(counts, peer, activations)
        result = device_and_host_checks(
            peer, machine, device_levels(terms)["device"], fsdp2_host_need_per_rank(counts, peer, terms)
        )
        _, volume = step_totals(
            fsdp2_theory(counts, peer.ranks, peer.dtype_bytes), peer.accumulation, peer.ranks
        )
        found.append(
            PeerPlan(
                variant=name,
                what=PEERS[name].what,
                fits=all(c.fits for c in result),
                checks=result,
                device_terms_bytes=terms if gpus else {},
                communicated_per_step_bytes=volume,
                note=(
                    "sizes at fp16 as at bf16; zerogate's FSDP2 engine trains fp32 or bf16 (fp16 needs "
                    "torch's "
                    "ShardedGradScaler)"
                )
                if setup.dtype == "fp16"
                else None,
            )
        )
    return found


def plan(
    counts: ModelCounts,
    setup: Setup,
    machine: dict[str, Any],
    override: PlanSettings | None = None,
    model_compute: ModelComputeMeasurement | None = None,
    profile: str = "",
    activations: Activations | None = None,
) -> Plan:
    """Fit, floor and ledger. ``override`` is the profile's ``plan`` section: ``allow_infeasible`` with a
    reason; ``model_compute`` the model's forward + backward measured here (floor.floor); ``activations`` the
    activation source (zerogate.predict.activations.TracedActivations of the run's model; default the
    formula). The gates are judged apart (zerogate.analysis.on_paper), so that editing a gate never re-plans,
    and so never retrains."""
    memory = checks(counts, setup, machine, activations)
    fits = all(c.fits for c in memory)
    allowed = bool(override and override.allow_infeasible)
    deviations = []
    if not fits and allowed:
        deviations.append(
            Deviation(
                path="plan.allow_infeasible",
                claim=None,
                rendered=True,
                kind="changed",
                reason=override.reason or "profile overrides the planner's refusal",
                changes_experiment=True,
            )
        )
    return Plan(
        machine=machine["name"],
        machine_source=machine["source"],
        profile=profile,
        scheme=setup.scheme,
        ranks=setup.ranks,
        nodes=setup.nodes,
        dtype=setup.dtype,
        fits=fits,
        refused=not fits and not allowed,
        deciding_check=min(memory, key=lambda c: c.headroom_bytes),
        checks=memory,
        largest_micro_batch_per_rank=largest_micro_batch(counts, setup, machine, activations),
        notes=notes(counts, setup, machine, activations),
        suggestions=[] if fits else suggestions(counts, setup, machine, activations),
        device_changes=device_changes(counts, setup, machine, activations),
        pinned_memory=pinned_note(counts, setup, machine),
        floor=Floor.of(floor(counts, setup, machine, model_compute), "the floor"),
        ledger=Ledger.of(ledger(counts, setup, activations), "the ledger"),
        deviations=deviations,
        peers=peer_plans(counts, setup, machine, activations),
    )


def refusal(result: Plan) -> str:
    """The refusal message: each failing check with rank, device, need and capacity; what would fit."""
    lines = [f"plan refused: the {result.scheme} run of {result.ranks} ranks does not fit {result.machine}:"]
    for check in result.checks:
        if not check.fits:
            rank = f"rank {check.rank} " if check.rank is not None else ""
            lines.append(
                f"  {rank}{check.device}: {check.what} needs {format_bytes(check.need_bytes)}, "
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


def summary(result: Plan, claims: list[tuple[str, str]] | None = None) -> str:
    """The human-readable plan: per-rank memory of every scheme, the floor, and ``claims`` (name, verdict
    text) as zerogate.analysis.on_paper judged them."""
    led = result.ledger
    lines = [
        f"machine {result.machine} ({result.machine_source}); {led.parameters:,} parameters "
        f"(largest layer {led.largest_layer_parameters:,}); {result.ranks} ranks, {result.dtype}; "
        f"this run: {result.scheme}",
        "per-rank device memory (paper | DeepSpeed estimator | zerogate incl. activations; host per node):",
    ]
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
    acts = led.activations
    shape = (
        f"{format_bytes(acts.per_layer_bytes)} per layer x {acts.layers} layers + "
        f"{format_bytes(acts.outside_layers_bytes)} outside"
        if acts.per_layer_bytes is not None and acts.outside_layers_bytes is not None
        else f"{acts.layers} layers"
    )
    lines.append(
        f"activations ({acts.basis}; micro-batch {led.micro_batch}, sequence {led.seq_len}, "
        f"{led.attention} attention, checkpointing {'on' if led.activation_checkpointing else 'off'}): "
        f"{format_bytes(acts.saved_bytes)} ({shape}), backward transient "
        f"{format_bytes(acts.backward_transient_bytes)}"
        + (
            ""
            if acts.at_first_gradient_bytes is None
            else f", alive at the first accumulated gradient {format_bytes(acts.at_first_gradient_bytes)} "
            "and "
            f"the backward's peak after it {format_bytes(acts.after_first_gradient_bytes)} more"
        )
        + "; the Korthikanti formula "
        f"{format_bytes(acts.formula_bytes)}"
    )
    own = led.own.zerogate
    lines.append(
        "this run's device terms per rank: "
        + ", ".join(f"{k} {format_bytes(v)}" for k, v in own.device_terms_bytes.items())
        + f"; tensor peak {format_bytes(own.device_tensor_peak_per_rank_bytes)}, allocator "
        f"{format_bytes(own.device_allocator_peak_per_rank_bytes)}, device "
        f"{format_bytes(own.device_per_rank_bytes)}"
    )
    lines.append("fit of this run:")
    for check in result.checks:
        rank = f"rank {check.rank} " if check.rank is not None else ""
        lines.append(
            f"  {'fits' if check.fits else 'DOES NOT FIT'}: {rank}{check.device} {check.what}: need "
            f"{format_bytes(check.need_bytes)}, capacity {format_bytes(check.capacity_bytes)}, headroom "
            f"{format_bytes(check.headroom_bytes)}"
        )
    if result.pinned_memory:
        lines.append(f"  note: {result.pinned_memory}")
    lines += [f"  note: {note}" for note in result.notes]
    lines.append(f"largest micro-batch per rank that fits: {result.largest_micro_batch_per_rank or 'none'}")
    if not result.fits:
        lines.append("changes that would fit:" + ("" if result.suggestions else " none of those considered"))
        lines += [f"  - {s.change}" + (f": {s.command}" if s.command else "") for s in result.suggestions]
    if result.device_changes:
        lines.append("changes that lower the device need (smallest device after each):")
        lines += [
            f"  - {s.change}: {format_bytes(s.smallest_device_need_bytes)}"
            + ("" if s.fits else " (the run still does not fit)")
            + (f": {s.command}" if s.command else "")
            for s in result.device_changes
        ]
    steps = result.floor
    micro, step = steps.micro_step_floor_s, steps.optimizer_step_floor_s
    lines.append(
        f"throughput floor: micro-step {'n/a' if micro is None else f'{micro:.3f} s'}, optimizer step "
        f"{'n/a' if step is None else f'{step:.3f} s'}"
        + (f" (left out: {'; '.join(steps.missing)})" if steps.missing else "")
    )
    for rank in steps.ranks:
        terms = ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in rank.terms.items())
        lines.append(f"  rank {rank.rank} {rank.device}: {terms}")
    for k, v in steps.optimizer_terms.items():
        lines.append(f"  optimizer update: {k} {'n/a' if v is None else f'{v:.3f}'}")
    lines += collective_lines(steps)
    if result.peers:
        lines.append("ZeRO-3's peers on this machine (the same model, batch, precision and ranks):")
        for peer in result.peers:
            needs = "; ".join(
                f"{'rank ' + str(c.rank) + ' ' if c.rank is not None else ''}{c.device} "
                f"{format_bytes(c.need_bytes)} of {format_bytes(c.capacity_bytes)}"
                for c in peer.checks
            )
            lines.append(
                f"  {peer.variant}: {'fits' if peer.fits else 'DOES NOT FIT'} ({needs}); communicates "
                f"{format_bytes(peer.communicated_per_step_bytes)} per rank and optimizer step"
                + (f" ({peer.note})" if peer.note else "")
            )
    if claims:
        lines.append("claims, on paper:")
        lines += [f"  {name}: {text}" for name, text in claims]
    return "\n".join(lines)


def _figure(fig: Any, unit: str, scale: float = 1.0) -> str:
    return "n/a (missing)" if fig is None else f"{fig.value * scale:.4g} {unit} ({fig.basis}: {fig.source})"


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


def target_machine(
    description: str | None, fingerprint: str | None, name: str
) -> tuple[dict[str, Any], Fingerprint]:
    """(machine, fingerprint) of the machine a run is rendered and planned for: a described one
    (config/machines/<name>.yaml, given as its path) or the probed one (the probe's file, named ``name``)."""
    from zerogate.config.machines import from_fingerprint, load_description, to_fingerprint

    if description is not None:
        machine = load_description(description)
        return machine, to_fingerprint(machine)
    assert fingerprint is not None
    probed = Fingerprint.read(fingerprint)
    return from_fingerprint(probed, name), probed


def run_setup(
    run_spec: RunSpec, ds_config: DsConfig, machine: dict[str, Any], share_traces: bool = False
) -> tuple[ModelCounts, Setup, Any]:
    """The run's model counted on the meta device, the ledger's view of its rendered config, and the
    activation source traced from the model: its own (zerogate.predict.activations.TracedActivations), or with
    ``share_traces`` the one every such plan of the same model in this process shares (traced_activations)."""
    from zerogate.model.build import planned_model_config
    from zerogate.model.counts import count_parameters
    from zerogate.predict.activations import TracedActivations, traced_activations
    from zerogate.predict.setup import setup_from_config

    config = planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len)
    counts = count_parameters(config)
    # Several nodes (the profile's nodes section, as rendered): each node holds its share of the ranks.
    nodes = len(run_spec.nodes.hosts) if run_spec.nodes else machine.get("nodes", 1)
    activations = traced_activations(config) if share_traces else TracedActivations(config)
    return counts, setup_from_config(ds_config, run_spec, nodes=nodes), activations


def plan_for_run(
    run_spec: RunSpec,
    ds_config: DsConfig,
    machine: dict[str, Any],
    override: PlanSettings,
    profile: str,
    model_compute: ModelComputeMeasurement | None = None,
    share_traces: bool = False,
) -> Plan:
    """Plan the run as render_deepspeed_config rendered it for ``machine`` (``ds_config``, ``run_spec``):
    count the model on the meta device, trace its activations under fake tensors, then fit, floor and
    ledger. ``model_compute``: measure_model_compute's measurement on this machine, if any;
    ``share_traces``: reuse this process's traces of the same model (run_setup)."""
    counts, setup, activations = run_setup(run_spec, ds_config, machine, share_traces)
    return plan(counts, setup, machine, override, model_compute, profile, activations)


def with_measured_compute(
    first: Plan,
    run_spec: RunSpec,
    ds_config: DsConfig,
    machine: dict[str, Any],
    model_compute: ModelComputeMeasurement | None,
) -> Plan:
    """``first`` (plan_for_run's plan of the same run, config and machine) with its floor made again with
    ``model_compute``: the floor is the one part of a plan that depends on it (see plan), so nothing is
    traced again."""
    counts, setup, _ = run_setup(run_spec, ds_config, machine)
    return first.model_copy(
        update={"floor": Floor.of(floor(counts, setup, machine, model_compute), "the floor")}
    )


def peak_prediction(
    counts: ModelCounts, setup: Setup, runtime_baseline: Any, activations: Activations | None = None
) -> PeakPrediction:
    """Each rank's predicted peak (ledger.peak_terms) and every level the accelerator measures
    (ledger.peak_levels): on GPUs the tensor, allocator and device peaks, on the CPU accelerator the
    live-tensor peak and the resident-set peak on top of the runtime baseline measured here
    (``runtime_baseline``: measure_runtime_baseline's measurement, None on GPUs). Every rank of a scheme holds
    the same terms (ZeRO pads each partition to the same size), so one prediction serves each rank."""
    from zerogate.predict.ledger import peak_levels, peak_terms

    baseline = None if runtime_baseline is None else runtime_baseline.peak_rss_bytes
    terms = peak_terms(counts, setup, baseline, activations)
    return _headline_peak(setup, terms, peak_levels(counts, setup, baseline, activations), runtime_baseline)


def _headline_peak(
    setup: Setup, terms: dict[str, int], levels: dict[str, dict[str, Any]], runtime_baseline: Any
) -> PeakPrediction:
    """The prediction with its headline figure, one of ``levels`` (ledger.HEADLINE_LEVEL): the resident set on
    the CPU accelerator, the caching allocator's level on GPUs, each beside the step-record column that
    measures it."""
    from zerogate.predict.ledger import HEADLINE_LEVEL, transient_bytes

    on_cpu = setup.device_kind == "cpu"
    headline = levels[HEADLINE_LEVEL[setup.device_kind]]
    total, transient = headline["predicted(bytes)"], transient_bytes(terms)
    return PeakPrediction(
        scheme=setup.scheme,
        ranks=setup.ranks,
        accelerator=setup.device_kind,
        metric=column("peak_rss_gib") if on_cpu else column("max_reserved_gib"),
        what=headline["what"],
        terms_bytes=terms,
        persistent_bytes=total - transient,
        transient_bytes=transient,
        total_bytes=total,
        runtime_baseline=runtime_baseline,
        levels=levels,
    )


def fsdp2_peak_for_run(run_spec: RunSpec, ds_config: DsConfig, runtime_baseline: Any) -> PeakPrediction:
    """The peak prediction of the run under torch FSDP2 (zerogate.predict.ledger.fsdp2_terms) from the config
    of the ZeRO variant it stands beside (its precision, ranks and parameter offload: CPUOffloadPolicy)."""
    from zerogate.predict.ledger import fsdp2_peak_levels

    counts, setup, activations = run_setup(run_spec, ds_config, {"nodes": 1})
    baseline = None if runtime_baseline is None else runtime_baseline.peak_rss_bytes
    terms, levels = fsdp2_peak_levels(counts, setup, baseline, activations)
    prediction = _headline_peak(setup, terms, levels, runtime_baseline)
    return prediction.model_copy(update={"scheme": "fsdp2_offload" if setup.offload_param else "fsdp2"})


def peak_for_run(run_spec: RunSpec, ds_config: DsConfig, runtime_baseline: Any) -> PeakPrediction:
    """The peak prediction of the run as rendered (``ds_config``, ``run_spec``), its activations traced."""
    counts, setup, activations = run_setup(run_spec, ds_config, {"nodes": 1})
    return peak_prediction(counts, setup, runtime_baseline, activations)
