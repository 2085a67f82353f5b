"""The planner: the ledger and the floor against a machine, assembled into the plan. Does the run fit, per
rank and per host (zerogate.predict.fit), what would make it fit (zerogate.predict.suggestions), how fast
could it be (zerogate.predict.floor), how long will a step take and where does the time go
(zerogate.predict.step_time), and how would ZeRO-3's peers fare on the same machine? Refuses an
infeasible run before training starts (approve_plan). Judging the profile's claims against a plan is
zerogate.analysis.on_paper's: the plan holds the figures, not verdicts."""

from __future__ import annotations

import dataclasses

from zerogate.config.launch import PlanSettings
from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import (
    ModelComputeMeasurement,
    PeerPlan,
    Plan,
)
from zerogate.contracts.run import Deviation, DsConfig, RunSpec
from zerogate.predict.activation_figures import Activations
from zerogate.predict.comms_terms import step_totals
from zerogate.predict.cuda_terms import overhead_spreads
from zerogate.predict.fit import (
    Need,
    checks,
    device_and_host_checks,
    largest_micro_batches,
    notes,
    overall_verdict,
    pinned_note,
)
from zerogate.predict.floor import floor
from zerogate.predict.fsdp2_comms import fsdp2_theory
from zerogate.predict.fsdp2_terms import fsdp2_host_need_per_rank, fsdp2_terms
from zerogate.predict.ledger import ledger
from zerogate.predict.microbench_rates import MeasuredRates
from zerogate.predict.phases import OVERHEAD, device_levels
from zerogate.predict.planned_run import run_setup
from zerogate.predict.setup import Setup
from zerogate.predict.step_time import planned_step_time
from zerogate.predict.suggestions import device_changes, host_changes, suggestions, time_changes
from zerogate.predict.zero_terms import bounds
from zerogate.render.variants import PEERS

# Why an FSDP2 peer planned at fp16 is not what zerogate's FSDP2 engine would train.
FP16_PEER_NOTE = (
    "sizes at fp16 as at bf16; zerogate's FSDP2 engine trains fp32 or bf16 (fp16 needs torch's "
    "ShardedGradScaler)"
)


def peer_plans(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[PeerPlan]:
    """ZeRO-3's peers (FSDP2 without and with CPUOffloadPolicy) on ``machine`` with the run's model, batch,
    precision and ranks: each rank's device need, the host's, whether both fit, and one rank's communication
    per optimizer step. The sizes hold for fp16 as for bf16 (two bytes); zerogate's FSDP2 engine trains fp32
    or bf16 (fp16 needs torch's ShardedGradScaler, which it does not run), which the note says."""
    found = []
    for name in ("fsdp2", "fsdp2-offload"):
        offload = name == "fsdp2-offload"
        peer = dataclasses.replace(setup, stage=3, offload_optimizer=offload, offload_param=offload)
        terms = fsdp2_terms(counts, peer, activations)
        result = device_and_host_checks(
            peer, machine, peer_device_need(terms, peer), fsdp2_host_need_per_rank(counts, peer, terms)
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
                device_terms_bytes=terms if machine.gpus else {},
                communicated_per_step_bytes=volume,
                note=FP16_PEER_NOTE if setup.dtype == "fp16" else None,
            )
        )
    return found


def peer_device_need(terms: dict[str, int], setup: Setup) -> Need:
    """A peer's device need with the interval of what it holds beside its tensors (cuda_terms)."""
    tensors = {k: v for k, v in terms.items() if k not in OVERHEAD}
    low, high = bounds(terms, overhead_spreads(tensors, setup, deepspeed_engine=False))
    return Need(device_levels(low).device, device_levels(terms).device, device_levels(high).device)


def deviations(fits: bool, override: PlanSettings | None) -> list[Deviation]:
    """The deviation a profile records when it trains a run that does not fit (``plan.allow_infeasible``)."""
    if fits or not (override and override.allow_infeasible):
        return []
    return [
        Deviation(
            path="plan.allow_infeasible",
            claim=None,
            rendered=True,
            kind="changed",
            reason=override.reason or "profile overrides the planner's refusal",
            changes_experiment=True,
        )
    ]


def plan(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
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
    largest = largest_micro_batches(counts, setup, machine, activations)
    return Plan(
        machine=machine.name,
        machine_source=machine.source,
        profile=profile,
        scheme=setup.scheme,
        ranks=setup.ranks,
        nodes=setup.nodes,
        dtype=setup.dtype,
        fits=fits,
        refused=not fits and not (override and override.allow_infeasible),
        deciding_check=min(memory, key=lambda c: c.headroom_bytes),
        checks=memory,
        largest_micro_batch_per_rank=largest["point"],
        verdict=overall_verdict(memory),
        largest_micro_batch_fits_per_rank=largest["fits"],
        largest_micro_batch_may_fit_per_rank=largest["may_fit"],
        notes=notes(counts, setup, machine, activations),
        suggestions=[] if fits else suggestions(counts, setup, machine, activations),
        device_changes=device_changes(counts, setup, machine, activations),
        host_changes=[] if fits else host_changes(counts, setup, machine, activations),
        time_changes=time_changes(counts, setup, machine, activations) if fits else [],
        pinned_memory=pinned_note(counts, setup, machine),
        floor=floor(counts, setup, machine, model_compute),
        ledger=ledger(counts, setup, activations),
        deviations=deviations(fits, override),
        peers=peer_plans(counts, setup, machine, activations),
        step_time=planned_step_time(counts, setup, machine, activations),
    )


def plan_for_run(
    run_spec: RunSpec,
    ds_config: DsConfig,
    machine: MachineDescription,
    override: PlanSettings,
    profile: str,
    model_compute: ModelComputeMeasurement | None = None,
) -> Plan:
    """Plan the run as render_deepspeed_config rendered it for ``machine`` (``ds_config``, ``run_spec``):
    count the model on the meta device, trace its activations under fake tensors, then fit, floor and
    ledger. ``model_compute``: measure_model_compute's measurement on this machine, if any."""
    counts, setup, activations = run_setup(run_spec, ds_config, machine.nodes)
    return plan(counts, setup, machine, override, model_compute, profile, activations)


def with_measured_compute(
    first: Plan,
    run_spec: RunSpec,
    ds_config: DsConfig,
    machine: MachineDescription,
    model_compute: ModelComputeMeasurement | None,
    measured: MeasuredRates | None = None,
) -> Plan:
    """``first`` (plan_for_run's plan of the same run, config and machine) with its floor made again with
    ``model_compute`` and its step time predicted again with this machine's micro-benchmarked rates
    (``measured``, zerogate.predict.microbench_rates.rates_from_microbench; None: as planned on paper): the
    two parts of a plan that depend on them (see plan), with the trace's count of the model's operators
    (zerogate.predict.step_time_operators) as the plan's own."""
    counts, setup, activations = run_setup(run_spec, ds_config, machine.nodes)
    update: dict[str, object] = {"floor": floor(counts, setup, machine, model_compute)}
    if measured is not None:
        update["step_time"] = planned_step_time(counts, setup, machine, activations, measured)
    return first.model_copy(update=update)
