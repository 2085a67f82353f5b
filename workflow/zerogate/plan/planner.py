"""The planner: the ledger and the floor against a machine. Does the run fit, per rank and per host, and
which of the profile's claims are impossible on it? Refuses an infeasible run before training starts."""

from __future__ import annotations

import dataclasses
from typing import Any

from zerogate.plan.floor import floor
from zerogate.plan.ledger import GB, GIB, ModelCounts, Setup, human, ledger, zerogate_terms

UNIT_BYTES = {"GB": GB, "GiB": GIB}


def _device_need(counts: ModelCounts, setup: Setup) -> int:
    return sum(zerogate_terms(counts, setup)["device"].values())


def _host_need(counts: ModelCounts, setup: Setup, on_cpu: bool) -> int:
    """Host RAM the node needs: offloaded state of its ranks, and on the CPU accelerator everything."""
    terms = zerogate_terms(counts, setup)
    per_rank = sum(terms["host"].values()) + (sum(terms["device"].values()) if on_cpu else 0)
    return per_rank * max(1, setup.ranks // setup.nodes)


def checks(counts: ModelCounts, setup: Setup, machine: dict[str, Any]) -> list[dict[str, Any]]:
    """One check per rank's device (GPUs) and one for host RAM, each with headroom."""
    gpus = machine.get("gpus", [])
    host = machine["host"]
    result = []
    if gpus:
        need = _device_need(counts, setup)
        for rank in range(setup.ranks):
            gpu = gpus[rank % len(gpus)]
            result.append({"what": "device memory", "rank": rank, "device": gpu["name"], "need(bytes)": need,
                           "capacity(bytes)": gpu["memory_total_bytes"], "headroom(bytes)": gpu["memory_total_bytes"] - need})
    host_need = _host_need(counts, setup, on_cpu=not gpus)
    result.append({"what": "host RAM", "rank": None, "device": "host (all ranks of the node)", "need(bytes)": host_need,
                   "capacity(bytes)": host["ram_total_bytes"], "headroom(bytes)": host["ram_total_bytes"] - host_need})
    for check in result:
        check["fits"] = check["headroom(bytes)"] >= 0
    return result


def pinned_note(counts: ModelCounts, setup: Setup, machine: dict[str, Any]) -> str | None:
    """Pinned host memory against RLIMIT_MEMLOCK: advice, not a refusal (CUDA's pinned allocations are
    made by the driver and need not count against the limit; mlock-based pinning does)."""
    limit = machine["host"].get("pinned_memory_limit_bytes")
    if not setup.pin_memory or not machine.get("gpus"):
        return None
    pinned = sum(zerogate_terms(counts, setup)["pinned"].values()) * max(1, setup.ranks // setup.nodes)
    if limit is not None and pinned > limit:
        return (f"pinned host memory {human(pinned)} exceeds RLIMIT_MEMLOCK {human(limit)}: if pinning fails, "
                f"raise the limit (ulimit -l) or set pin_memory false")
    return f"pinned host memory {human(pinned)}" + (" (RLIMIT_MEMLOCK unlimited)" if limit is None else "")


def _variants(setup: Setup) -> list[tuple[str, Setup]]:
    """Changes a user could make, each alone and the strongest combined."""
    options: list[tuple[str, Setup]] = []
    if setup.scheme != "zero3_offload_optimizer" and not setup.offload_param:
        options.append(("ZeRO-3 with optimizer offload to CPU", setup.with_scheme("zero3_offload_optimizer")))
    if setup.scheme != "zero3_offload_all":
        options.append(("ZeRO-3 with optimizer and parameter offload to CPU", setup.with_scheme("zero3_offload_all")))
    if setup.micro_batch > 1:
        options.append((f"micro-batch 1 instead of {setup.micro_batch} (accumulation x{setup.micro_batch} keeps the batch)",
                        dataclasses.replace(setup, micro_batch=1, accumulation=setup.accumulation * setup.micro_batch)))
    if not setup.activation_checkpointing:
        options.append(("activation checkpointing", dataclasses.replace(setup, activation_checkpointing=True)))
    for factor in (2, 4, 8):
        options.append((f"{setup.ranks * factor} ranks ({setup.nodes * factor} nodes like this one)",
                        dataclasses.replace(setup, ranks=setup.ranks * factor, nodes=setup.nodes * factor)))
    strongest = dataclasses.replace(setup.with_scheme("zero3_offload_all"), micro_batch=1, activation_checkpointing=True)
    options.append(("all of: full offload, micro-batch 1, activation checkpointing", strongest))
    for factor in (2, 4, 8):
        options.append((f"all of: full offload, micro-batch 1, activation checkpointing, {setup.ranks * factor} ranks "
                        f"({setup.nodes * factor} nodes like this one)",
                        dataclasses.replace(strongest, ranks=setup.ranks * factor, nodes=setup.nodes * factor)))
    return options


def suggestions(counts: ModelCounts, setup: Setup, machine: dict[str, Any]) -> list[dict[str, Any]]:
    """The changes that would make the run fit, with the need they leave on the tightest check."""
    found = []
    for change, variant in _variants(setup):
        result = checks(counts, variant, machine)
        if all(c["fits"] for c in result):
            tightest = min(result, key=lambda c: c["headroom(bytes)"])
            found.append({"change": change, "tightest": tightest["what"], "need(bytes)": tightest["need(bytes)"],
                          "capacity(bytes)": tightest["capacity(bytes)"],
                          # The same change as settings (plan.overlay writes a runnable profile from them).
                          "settings": {"nodes": variant.nodes, "ranks": variant.ranks,
                                       "micro_batch": variant.micro_batch, "accumulation": variant.accumulation,
                                       "offload_optimizer": variant.offload_optimizer,
                                       "offload_param": variant.offload_param,
                                       "activation_checkpointing": variant.activation_checkpointing}})
    return found


def claim_verdicts(gates: list[dict[str, Any]], memory: list[dict[str, Any]], step_floor: dict[str, Any],
                   model_state_floor: int | None) -> list[dict[str, Any]]:
    """For each memory or step-time gate of the profile: possible on paper on this machine, or not, and why."""
    verdicts = []
    devices = [c for c in memory if c["rank"] is not None]
    for gate in gates:
        if gate["metric"].startswith("memory/") and gate["unit"] in UNIT_BYTES and devices:
            limit = gate["threshold"] * UNIT_BYTES[gate["unit"]]
            small = min(devices, key=lambda c: c["capacity(bytes)"])
            need = small["need(bytes)"]
            if model_state_floor is not None and model_state_floor >= limit:
                verdict, why = "impossible", (f"DeepSpeed's own model-state estimate alone is {human(model_state_floor)} "
                                              f">= {gate['threshold']} {gate['unit']}")
            elif need >= limit:
                verdict, why = "not expected", (f"zerogate predicts {human(need)} on rank {small['rank']} "
                                                f"({small['device']}) >= {gate['threshold']} {gate['unit']}")
            else:
                verdict, why = "possible", f"zerogate predicts {human(need)} < {gate['threshold']} {gate['unit']}"
            verdicts.append({"gate": gate["name"], "claim": gate["claim"], "verdict": verdict, "why": why})
        elif gate["metric"] == "step_time(s)" and gate["unit"] == "s":
            micro, step = step_floor["micro_step_floor(s)"], step_floor["optimizer_step_floor(s)"]
            if micro is None:
                verdicts.append({"gate": gate["name"], "claim": gate["claim"], "verdict": "unknown",
                                 "why": "no floor: " + "; ".join(step_floor["missing"])})
                continue
            as_step = "impossible" if step > gate["threshold"] else "possible"
            as_micro = "impossible" if micro > gate["threshold"] else "possible"
            verdicts.append({
                "gate": gate["name"], "claim": gate["claim"],
                "verdict": as_step,
                "why": (f"optimizer-step floor {step:.2f} s vs {gate['threshold']} s ({as_step}); read as a "
                        f"micro-step, floor {micro:.2f} s ({as_micro})"),
                "as_micro_step": as_micro,
            })
    return verdicts


def plan(counts: ModelCounts, setup: Setup, machine: dict[str, Any],
         override: dict[str, Any] | None = None, model_compute: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit, floor and ledger. ``override`` is the profile's ``plan`` section: ``allow_infeasible`` with a
    reason; ``model_compute`` the model's forward + backward measured here (floor.floor). The gates are
    judged apart (:func:`judge_claims`), so that editing a gate never re-plans, and so never retrains."""
    memory = checks(counts, setup, machine)
    fits = all(c["fits"] for c in memory)
    steps = floor(counts, setup, machine, model_compute)
    full = ledger(counts, setup)
    allowed = bool(override and override.get("allow_infeasible"))
    deviations = []
    if not fits and allowed:
        deviations.append({"path": "plan.allow_infeasible", "claim": None, "rendered": True, "kind": "changed",
                           "reason": override.get("reason", "profile overrides the planner's refusal"),
                           "changes_experiment": True})
    return {
        "machine": machine["name"],
        "machine_source": machine["source"],
        "scheme": setup.scheme,
        "ranks": setup.ranks,
        "nodes": setup.nodes,
        "dtype": setup.dtype,
        "fits": fits,
        "refused": not fits and not allowed,
        "deciding_check": min(memory, key=lambda c: c["headroom(bytes)"]),
        "checks": memory,
        "suggestions": [] if fits else suggestions(counts, setup, machine),
        "pinned_memory": pinned_note(counts, setup, machine),
        "micro_step_floor(s)": steps["micro_step_floor(s)"],
        "optimizer_step_floor(s)": steps["optimizer_step_floor(s)"],
        "floor": steps,
        "ledger": full,
        "deviations": deviations,
    }


def judge_claims(result: dict[str, Any], gates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The profile's memory and step-time claims judged on paper against a plan, the run's fit first."""
    estimate = result["ledger"]["schemes"][result["scheme"]]["deepspeed"]
    memory = result["checks"]
    claims = claim_verdicts(gates, memory, result["floor"], None if estimate is None else estimate["device_per_rank(bytes)"])
    failing = [c for c in memory if not c["fits"]]
    claims.insert(0, {
        "gate": "run_fits_machine", "claim": "the profile's run can be held by this machine",
        "verdict": "impossible" if failing else "possible",
        "why": "; ".join(f"{c['device']} {c['what']}: needs {human(c['need(bytes)'])}, capacity "
                         f"{human(c['capacity(bytes)'])}" for c in failing) or "every check has headroom",
    })
    return claims


def refusal(result: dict[str, Any]) -> str:
    """The refusal message: each failing check with rank, device, need and capacity; what would fit."""
    lines = [f"plan refused: the {result['scheme']} run of {result['ranks']} ranks does not fit {result['machine']}:"]
    for check in result["checks"]:
        if not check["fits"]:
            rank = f"rank {check['rank']} " if check["rank"] is not None else ""
            lines.append(f"  {rank}{check['device']}: {check['what']} needs {human(check['need(bytes)'])}, "
                         f"capacity {human(check['capacity(bytes)'])}")
    if result["suggestions"]:
        lines.append("changes that would fit:")
        lines += [f"  - {s['change']} ({s['tightest']}: {human(s['need(bytes)'])} of {human(s['capacity(bytes)'])})"
                  for s in result["suggestions"]]
    else:
        lines.append("no single change considered (offload, micro-batch 1, activation checkpointing, 2-8x ranks) fits")
    lines.append("to train anyway, set `plan: {allow_infeasible: true, reason: ...}` in the profile (recorded as a deviation)")
    return "\n".join(lines)


def summary(result: dict[str, Any], claims: list[dict[str, Any]] | None = None) -> str:
    """The human-readable plan: per-rank memory of every scheme, the floor, the claims' verdicts."""
    led = result["ledger"]
    lines = [f"machine {result['machine']} ({result['machine_source']}); {led['parameters']:,} parameters "
             f"(largest layer {led['largest_layer_parameters']:,}); {result['ranks']} ranks, {result['dtype']}; "
             f"this run: {result['scheme']}",
             "per-rank device memory (paper | DeepSpeed estimator | zerogate incl. activations; host per node):"]
    for scheme, row in led["schemes"].items():
        ds = row["deepspeed"]
        zg = row["zerogate"]
        lines.append(
            f"  {scheme:<24} paper {human(row['paper']['device_per_rank(bytes)'])} | "
            f"DeepSpeed {human(ds and ds['device_per_rank(bytes)'])}, host {human(ds and ds['host_per_node(bytes)'])} | "
            f"zerogate {human(zg['device_per_rank(bytes)'])} ({'with' if not led['activation_checkpointing'] else 'without'} "
            f"checkpointing {human(zg['device_per_rank_other_checkpointing(bytes)'])}), host {human(zg['host_per_node(bytes)'])}")
    lines.append("fit of this run:")
    for check in result["checks"]:
        rank = f"rank {check['rank']} " if check["rank"] is not None else ""
        lines.append(f"  {'fits' if check['fits'] else 'DOES NOT FIT'}: {rank}{check['device']} {check['what']}: need "
                     f"{human(check['need(bytes)'])}, capacity {human(check['capacity(bytes)'])}, headroom "
                     f"{human(check['headroom(bytes)'])}")
    if result.get("pinned_memory"):
        lines.append(f"  note: {result['pinned_memory']}")
    if not result["fits"]:
        lines.append("changes that would fit: " + ("; ".join(s["change"] for s in result["suggestions"]) or "none of those considered"))
    micro, step = result["micro_step_floor(s)"], result["optimizer_step_floor(s)"]
    lines.append(f"throughput floor: micro-step {'n/a' if micro is None else f'{micro:.3f} s'}, optimizer step "
                 f"{'n/a' if step is None else f'{step:.3f} s'}"
                 + (f" (left out: {'; '.join(result['floor']['missing'])})" if result["floor"]["missing"] else ""))
    for rank in result["floor"]["ranks"]:
        terms = ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in rank["terms"].items())
        lines.append(f"  rank {rank['rank']} {rank['device']}: {terms}")
    for k, v in result["floor"]["optimizer_terms"].items():
        lines.append(f"  optimizer update: {k} {'n/a' if v is None else f'{v:.3f}'}")
    lines += collective_lines(result["floor"])
    if claims:
        lines.append("claims:")
        lines += [f"  {c['gate']}: {c['verdict'].upper()}: {c['why']}" for c in claims]
    return "\n".join(lines)


def _figure(fig: dict[str, Any] | None, unit: str, scale: float = 1.0) -> str:
    return "n/a (missing)" if fig is None else f"{fig['value'] * scale:.4g} {unit} ({fig['basis']}: {fig['source']})"


def collective_lines(steps: dict[str, Any]) -> list[str]:
    """The floor's collective terms as the plan prints them: per micro-step and per boundary, each kind's
    calls x latency + volume / bandwidth, every figure with its basis and source."""
    communication = steps.get("communication")
    if not communication:
        return []
    lines = [f"  collectives ({communication['scheme']}, {communication['world']} ranks, "
             f"{communication.get('backend') or 'backend n/a'}, {communication.get('route') or 'route n/a'}):"]
    for per, label in (("micro_step", "per micro-step"), ("boundary", "per boundary")):
        part = communication[per]
        total = "n/a" if part["seconds"] is None else f"{part['seconds']:.4g} s"
        lines.append(f"    {label}: {total}" + ("" if part["kinds"] else " (no collectives)"))
        for kind, row in part["kinds"].items():
            latency = "n/a" if row["latency_time(s)"] is None else f"{row['latency_time(s)']:.4g} s"
            transfer = "n/a" if row["transfer_time(s)"] is None else f"{row['transfer_time(s)']:.4g} s"
            lines.append(f"      {kind}: {row['calls']:g} calls x latency = {latency}; {row['volume(bytes)']:.4g} B / "
                         f"bandwidth = {transfer}")
            lines.append(f"        latency {_figure(row['latency'], 'ms', 1e3)}")
            lines.append(f"        bandwidth {_figure(row['bandwidth'], 'GB/s')}")
    return lines


def target_machine(description: str | None, fingerprint: dict[str, Any] | None,
                   name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(machine, fingerprint) of the machine a run is rendered and planned for: a described one
    (config/machines/<name>.yaml, given as its path) or the probed one (its fingerprint, named ``name``)."""
    from zerogate.config.machines import from_fingerprint, load_description, to_fingerprint

    if description is not None:
        machine = load_description(description)
        return machine, to_fingerprint(machine)
    assert fingerprint is not None
    return from_fingerprint(fingerprint, name), fingerprint


def plan_for_profile(profile: dict[str, Any], ds_config: dict[str, Any], run_spec: dict[str, Any],
                     machine: dict[str, Any], model_compute: dict[str, Any] | None = None) -> dict[str, Any]:
    """Plan the run of ``profile`` as render_deepspeed_config rendered it for ``machine`` (``ds_config``,
    ``run_spec``): count the model on the meta device, then fit, floor and ledger. ``model_compute``:
    measure_model_compute's measurement on this machine, if any."""
    from zerogate.plan.ledger import count_parameters, setup_from_config
    from zerogate.model.build import planned_model_config

    counts = count_parameters(planned_model_config(profile["model"], profile["dataset"]))
    seq_len = profile["dataset"]["seq_len"]
    # Several nodes (the profile's nodes section, as rendered): each node holds its share of the ranks.
    nodes = len(run_spec["nodes"]["hosts"]) if run_spec.get("nodes") else machine.get("nodes", 1)
    setup = setup_from_config(ds_config, run_spec, seq_len, nodes=nodes,
                              activation_checkpointing=profile["training"].get("activation_checkpointing", False))
    return plan(counts, setup, machine, profile.get("plan"), model_compute)


def peak_prediction(counts: ModelCounts, setup: Setup, runtime_baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Each rank's predicted peak (ledger.peak_terms): on GPUs the allocator's reserved peak, on the CPU
    accelerator the resident-set peak on top of the runtime baseline the probe measured
    (``runtime_baseline``: measure_runtime_baseline's record, None on GPUs). Every rank of a scheme holds
    the same terms (ZeRO pads each partition to the same size), so one prediction serves each rank."""
    from zerogate.plan.ledger import peak_split, peak_terms

    baseline = None if runtime_baseline is None else runtime_baseline["peak_rss(bytes)"]
    terms = peak_terms(counts, setup, baseline)
    return {
        "scheme": setup.scheme,
        "ranks": setup.ranks,
        "accelerator": setup.device_kind,
        "metric": "memory/peak_rss(GiB)" if setup.device_kind == "cpu" else "memory/max_reserved(GiB)",
        "what": ("resident-set peak of the rank's process (VmHWM)" if setup.device_kind == "cpu"
                 else "the CUDA caching allocator's reserved peak"),
        "terms(bytes)": terms,
        **peak_split(terms),
        "runtime_baseline": runtime_baseline,
    }


def peak_for_profile(profile: dict[str, Any], ds_config: dict[str, Any], run_spec: dict[str, Any],
                     runtime_baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The peak prediction of the run of ``profile`` as rendered (``ds_config``, ``run_spec``)."""
    from zerogate.model.build import planned_model_config
    from zerogate.plan.ledger import count_parameters, setup_from_config

    counts = count_parameters(planned_model_config(profile["model"], profile["dataset"]))
    setup = setup_from_config(ds_config, run_spec, profile["dataset"]["seq_len"],
                              activation_checkpointing=profile["training"].get("activation_checkpointing", False))
    return peak_prediction(counts, setup, runtime_baseline)
