"""The step-time ledger: how long one optimizer step will take on a machine, term by term, as an interval.

Where the floor (zerogate.predict.floor) takes every peak and perfect overlap, the ledger takes each rate at
an achievable fraction of its peak (zerogate.predict.rates, each bracketed low / high with its source) and
overlaps only what DeepSpeed runs on separate streams. Terms, per optimizer step of G micro-steps:

- forward, backward, recomputation: the FLOP of zerogate.hardware.training_flops_per_token split by kind
  (the parameters' products, 6 per parameter and token; the attention's scores and values, 12 x layers x
  hidden x sequence, times the share of them the run's causal kernel computes, from half with
  FlashAttention's skipped tiles to the whole: zerogate.hardware.causal_attention_share,
  Setup.attention_share) and by pass (the forward a third, the backward two thirds, full checkpointing the
  forward once more), each kind at its achievable rate: the card's peak (zerogate.hardware.peak) x
  GPU_MATMUL / GPU_ATTENTION, or on the CPU accelerator a rank's share of the probe's fp32 peak x
  CPU_ARITHMETIC;
- functional operators: the ops a micro-step runs beyond its products, counted by the planner's trace; on a
  synchronised device (the CPU accelerator) at the micro-benchmarks' cost per op and per byte moved, on a GPU
  their bytes through the device's memory at DEVICE_MEMORY, beside the products on the compute stream
  (zerogate.predict.step_time_operators);
- collectives: the communication theory's calls and volume per micro-step and per boundary
  (zerogate.predict.floor.theory_terms, zerogate.predict.floor.collective_time: the machine's route and
  figures, NVLink's, peer-to-peer, through host memory or the network), each kind's calls x latency plus
  its volume at the bandwidth figure (low) and calls x the latency's high end (a published latency is an
  interval: zerogate.config.cards.RouteLatency) plus the volume at COLLECTIVE_BANDWIDTH.low of it, or at
  the probe's slowest repeat where that is slower (high; step_time_terms.slow_transfer);
- host <-> device copies (offload): with parameter offload each rank copies its partition of every gathered
  parameter to the device (the fetch trace's gathers, zerogate.predict.fetch_trace.zero3_gathers, / N); with
  optimizer offload the reduced gradient partition goes to the host buffer every micro-step and, after the
  first, comes back to be accumulated on the device (stage3.py ``partition_grads``: "if dst is CPU, copy first
  to src device, do the addition there, then move back"), in the gradient accumulation dtype (fp32), and the
  updated 16-bit partition returns to the device after the update (``_reassign_or_swap_out_partitioned_
  parameters``); pinned or pageable (PCIE_PINNED / PCIE_PAGEABLE);
- the optimizer update: Adam's memory traffic (zerogate.predict.floor.adam_bytes_per_param) over the host's
  memory (DeepSpeed's CPU Adam, all ranks' partitions on one host's memory) or the device's (the fused Adam on
  the rank's partition), at HOST_MEMORY / DEVICE_MEMORY of the bandwidth;
- the boundary's serial sections (stage3.py ``step``): the gradient norm and unscale over the gradient
  partition (``_get_norm_groups``, ``unscale_and_clip_grads``: at ZeRO 1-3 on a float64 copy of each
  gradient, zerogate.predict.step_time_update.norm_bytes_per_element), the boundary's collectives
  (persistent parameters re-gathered, the norm's all-reduce);
- the copies DeepSpeed makes around its reductions (into the bucket, divided, flattened for the collective,
  the owner's partition) and at the boundary (the partition flattened, the updated partition into the
  16-bit one): zerogate.predict.step_time_copies, serial.

The overlap rule (DeepSpeed 0.19.8, torch): on a device that runs asynchronously (CUDA) with ``overlap_comm``
(zero/config.py ``overlap_comm_valid``: on by default at stage 3), ZeRO-3 all-gathers on its own stream
(parameter_offload.py ``__allgather_stream``) and, with a prefetch bucket above 0, launches the next modules'
gathers while the current one computes (partitioned_param_coordinator.py ``fetch_sub_module``); it
reduce-scatters and offloads gradients on ``reduce_and_partition_stream`` (stage3.py), so those overlap the
compute. What stays exposed: the micro-step's first fetch (a prefetch bucket's gather, nothing to hide it
behind) and the last gradient bucket (``independent_gradient_partition_epilogue`` synchronises that stream
after the backward). The link resources: without NVLink the collectives and the host copies share each rank's
PCIe link (their seconds add); with NVLink they run on separate links. A micro-step is then the longest of
compute and the link resources, plus the exposed parts. Without ``overlap_comm``, without prefetch, at stages
below 3 (their reductions on the default stream unless ``overlap_comm``) or on a synchronised device (the CPU
accelerator: accelerator ``is_synchronized_device``, DeepSpeed creates no streams) every term adds. The
boundary's sections run one after the other after the last micro-step (the update needs the reduced
gradients, the next forward the updated partitions): they add.

The interval: low from every term's low seconds, high from every high, under the same rule; the deciding
term is the one that contributes most to the interval's middle. A term without a figure is left out of both
and listed in ``missing``: the interval is then too low, and says so.
"""

from __future__ import annotations

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import StepTime, TimeTerm
from zerogate.predict.activation_figures import Activations, traced_operators
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_copies import copy_terms
from zerogate.predict.step_time_modules import module_terms
from zerogate.predict.step_time_operators import operator_terms
from zerogate.predict.step_time_terms import (
    COLLECTIVE,
    COMPUTE,
    HOST_COPY,
    HOST_WORK,
    Seconds,
    Term,
    collective_terms,
    compute_terms,
    host_copy_terms,
    overlaps,
)
from zerogate.predict.step_time_update import boundary_terms


def _mid(seconds: Seconds) -> float:
    return 0.0 if seconds is None else (seconds[0] + seconds[1]) / 2


def _links(beside: list[Term], nvlink: bool) -> list[list[Term]]:
    """The link resources the overlapped terms load, each a group whose seconds add: with NVLink the
    collectives on NVLink, the copies to and from the device on the PCIe link's two directions; without, the
    collectives cross each rank's PCIe link in both directions (sending and receiving), beside the copies of
    that direction (PCIe is full duplex: the two directions are separate resources)."""
    collectives = [t for t in beside if t.kind == COLLECTIVE]
    h2d = [t for t in beside if t.kind == HOST_COPY and "h2d" in t.name]
    d2h = [t for t in beside if t.kind == HOST_COPY and "h2d" not in t.name]
    if nvlink:
        return [group for group in (collectives, h2d, d2h) if group]
    return [group for group in (collectives + h2d, collectives + d2h) if group]


def _value(seconds: Seconds, at: int) -> float:
    if seconds is None:
        return 0.0
    return _mid(seconds) if at == 2 else seconds[at]


def _micro_step(terms: list[Term], nvlink: bool, at: int) -> tuple[float, dict[str, float]]:
    """Seconds of the micro-step terms per optimizer step at bound ``at`` (0 low, 1 high) under the overlap
    rule, and what each term contributes (``at`` 2: the middle of low and high). The host's own work beside a
    GPU's kernels (``HOST_WORK``) runs beside the device's whole micro-step: at the low end the longer of the
    two, at the high end both one after the other (how far the host waits for the device is not modelled)."""
    host = [t for t in terms if t.kind == HOST_WORK]
    device, contributions = _device_micro_step([t for t in terms if t.kind != HOST_WORK], nvlink, at)
    work = sum(_value(t.seconds, at) for t in host)
    beyond = {0: max(0.0, work - device), 1: work}
    added = (beyond[0] + beyond[1]) / 2 if at == 2 else beyond[at]
    for t in host:
        contributions[t.name] = added * _value(t.seconds, at) / work if work else 0.0
    return device + added, contributions


def _device_micro_step(terms: list[Term], nvlink: bool, at: int) -> tuple[float, dict[str, float]]:
    """The micro-step terms but the host's work beside the kernels, under the overlap rule (as
    :func:`_micro_step`)."""

    def value(seconds: Seconds) -> float:
        return _value(seconds, at)

    serial = [t for t in terms if not t.overlapped]
    beside = [t for t in terms if t.overlapped]
    contributions = {t.name: value(t.seconds) for t in serial}
    if not beside:
        return sum(contributions.values()), contributions
    compute = sum(value(t.seconds) for t in serial if t.kind == COMPUTE)
    groups = _links(beside, nvlink)
    longest = max(groups, key=lambda group: sum(value(t.seconds) for t in group))
    hidden = sum(value(t.seconds) for t in longest)
    exposed = {t.name: value(t.exposed) for t in beside}
    for t in beside:
        contributions[t.name] = exposed[t.name]
    if hidden > compute:
        # The link decides: the compute hides behind it (less its own share, counted where it is serial).
        for t in longest:
            contributions[t.name] += value(t.seconds)
        for t in serial:
            if t.kind == COMPUTE:
                contributions[t.name] = 0.0
    total = (
        max(compute, hidden)
        + sum(exposed.values())
        + sum(value(t.seconds) for t in serial if t.kind != COMPUTE)
    )
    return total, contributions


def _row(term: Term, contribution: float, total: float) -> TimeTerm:
    return TimeTerm(
        name=term.name,
        kind=term.kind,
        per=term.per,
        low_s=None if term.seconds is None else term.seconds[0],
        high_s=None if term.seconds is None else term.seconds[1],
        overlapped=term.overlapped,
        contribution_s=None if term.seconds is None else contribution,
        share=None if term.seconds is None or not total else contribution / total,
        source=term.source,
    )


def overlap_rule(setup: Setup, machine: MachineDescription) -> str:
    """The overlap rule applied to this run, in words, with its source."""
    if overlaps(setup, machine):
        return (
            "ZeRO-3 with overlap_comm and prefetch on an asynchronous device: gathers and host copies on the "
            "allgather stream (parameter_offload.py, partitioned_param_coordinator.py fetch_sub_module), "
            "reductions and gradient offload on reduce_and_partition_stream (stage3.py) beside the compute; "
            "the first prefetch bucket and the last reduce bucket exposed; "
            + (
                "NVLink: collectives and PCIe copies on separate links"
                if machine.nvlink
                else "collectives and copies share each rank's PCIe link"
            )
        )
    reason = (
        "the CPU accelerator is a synchronised device (no streams)"
        if not machine.gpus or setup.device_kind == "cpu"
        else "overlap_comm off or no prefetch bucket"
        if setup.stage == 3
        else f"ZeRO-{setup.stage}: reductions on the default stream (overlap_comm not modelled below stage 3)"
    )
    return f"every term serial: {reason}"


def step_time(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    measured: MeasuredRates | None = None,
    operators: OperatorTally | None = None,
) -> StepTime:
    """The predicted optimizer-step time of ``setup`` on ``machine``: every term (module doc), the interval
    (low, high) under the overlap rule, and the term that decides it. ``measured``: this machine's rates from
    the micro-benchmarks (zerogate.predict.microbench_rates.rates_from_microbench), which replace the peaks x
    fractions where they have a figure (the linear layers' products, the copies, the optimizer update); the
    collectives are the machine description's either way (the probe's, which the micro-benchmarks carry).
    ``operators``: the trace's count of the model's operators beyond its products (the activations' trace),
    for the functional operators (zerogate.predict.step_time_operators)."""
    overlap = overlaps(setup, machine)
    terms = (
        compute_terms(counts, setup, machine, measured)
        + module_terms(counts, setup, machine, measured)
        + operator_terms(operators, setup, machine, measured)
        + collective_terms(counts, setup, machine, overlap)
        + host_copy_terms(counts, setup, machine, overlap, measured)
        + copy_terms(counts, setup, machine, measured)
        + boundary_terms(counts, setup, machine, measured)
    )
    micro = [t for t in terms if t.per == MICRO_STEP]
    boundary = [t for t in terms if t.per == BOUNDARY]
    nvlink = bool(machine.nvlink)
    bounds = [_micro_step(micro, nvlink, at)[0] for at in (0, 1)]
    _, contributions = _micro_step(micro, nvlink, 2)
    contributions.update({t.name: _mid(t.seconds) for t in boundary})
    ends = [bounds[at] + sum(t.seconds[at] for t in boundary if t.seconds is not None) for at in (0, 1)]
    total = sum(contributions.values())
    missing = [f"{t.name}: {t.source}" for t in terms if t.seconds is None] + [
        f"{t.name}: {t.left_out}" for t in terms if t.left_out
    ]
    known = [t for t in terms if t.seconds is not None]
    deciding = max(known, key=lambda t: contributions[t.name]).name if known else None
    g = setup.accumulation
    return StepTime(
        low_s=ends[0] if known else None,
        high_s=ends[1] if known else None,
        deciding_term=deciding,
        micro_step_low_s=bounds[0] / g if known else None,
        micro_step_high_s=bounds[1] / g if known else None,
        accumulation=g,
        overlap=overlap_rule(setup, machine),
        terms=[_row(t, contributions[t.name], total) for t in terms],
        missing=missing,
    )


def planned_step_time(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    activations: Activations | None,
    measured: MeasuredRates | None = None,
) -> StepTime:
    """:func:`step_time` with the trace's count of the model's operators for ``setup``
    (zerogate.predict.activation_figures.traced_operators; none without a trace): a plan's step, a changed
    setup's, a published row's."""
    return step_time(counts, setup, machine, measured, traced_operators(activations, setup))
