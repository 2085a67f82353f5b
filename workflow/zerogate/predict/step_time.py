"""The step-time ledger: how long one optimizer step will take on a machine, term by term, as an interval.

Where the floor (zerogate.predict.floor) takes every peak and perfect overlap, the ledger takes each rate at
an achievable fraction of its peak (zerogate.predict.rates, each bracketed low / high with its source) and
overlaps only what DeepSpeed runs on separate streams. Terms, per optimizer step of G micro-steps:

- forward, backward, recomputation: the FLOP of zerogate.hardware.training_flops_per_token split by kind
  (the parameters' products, 6 per parameter and token; the attention's scores and values, 12 x layers x
  hidden x sequence) and by pass (the forward a third, the backward two thirds, full checkpointing the
  forward once more), each kind at its achievable rate: the card's peak (zerogate.hardware.peak) x
  GPU_MATMUL / GPU_ATTENTION, or on the CPU accelerator a rank's share of the probe's fp32 peak x
  CPU_ARITHMETIC;
- collectives: the communication theory's calls and volume per micro-step and per boundary
  (zerogate.predict.floor.theory_terms, zerogate.predict.floor.collective_time: the machine's route and
  figures, NVLink's, peer-to-peer, through host memory or the network), each kind at its figure (low) and at
  COLLECTIVE_BANDWIDTH.low of it (high);
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
  partition (``_get_norm_groups``, ``unscale_and_clip_grads``: read it twice, write it once, fp32), the
  boundary's collectives (persistent parameters re-gathered, the norm's all-reduce).

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

from dataclasses import dataclass

from zerogate import hardware
from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import StepTime, TimeTerm
from zerogate.predict import rates
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.fetch_trace import zero3_gathers
from zerogate.predict.floor import adam_bytes_per_param, collective_time, pcie_gbps, theory_terms
from zerogate.predict.setup import Setup

COMPUTE, COLLECTIVE, HOST_COPY, OPTIMIZER, SERIAL = (
    "compute",
    "collective",
    "host_copy",
    "optimizer",
    "serial",
)
# Bytes of one gradient element where DeepSpeed accumulates and offloads it (gradient_accumulation_dtype:
# fp32 for 16-bit training, stage3.py ``grad_partitions_flat_buffer``).
GRAD_ACCUMULATION_BYTES = 4
# The gradient norm and unscale per gradient element: read for the norm, read and written to unscale.
NORM_BYTES_PER_ELEMENT = 3 * GRAD_ACCUMULATION_BYTES

Seconds = tuple[float, float] | None


@dataclass(frozen=True)
class Term:
    """One ledger term before the overlap rule: (low, high) seconds per optimizer step, or None."""

    name: str
    kind: str
    per: str
    seconds: Seconds
    overlapped: bool
    source: str
    exposed: Seconds = None  # the part the overlap leaves on the critical path (per optimizer step)
    left_out: str = ""  # a part without a figure, left out of ``seconds``


def flop_by_kind(counts: ModelCounts, setup: Setup) -> dict[str, float]:
    """One rank's FLOP per micro-step by kind (``matmul``: the parameters' products, ``attention``: scores and
    values), forward and backward, from the one definition (zerogate.hardware.training_flops_per_token)."""
    tokens = setup.micro_batch * setup.seq_len
    return {
        "matmul": hardware.training_flops_per_token(counts.total, 0, 0, setup.seq_len) * tokens,
        "attention": hardware.training_flops_per_token(0, counts.layers, counts.hidden, setup.seq_len)
        * tokens,
    }


def _scaled(seconds: Seconds, factor: float) -> Seconds:
    return None if seconds is None else (seconds[0] * factor, seconds[1] * factor)


def _added(*parts: Seconds) -> Seconds:
    if any(p is None for p in parts):
        return None
    return sum(p[0] for p in parts), sum(p[1] for p in parts)  # type: ignore[index]


def _pass_seconds(counts: ModelCounts, setup: Setup, machine: MachineDescription) -> tuple[Seconds, str]:
    """(low, high) seconds of one micro-step's forward pass on the slowest rank, and the rate's source."""
    flop = flop_by_kind(counts, setup)
    forward = {kind: value / 3 for kind, value in flop.items()}  # 2 of 6 per parameter, 4 of 12 attention
    if not machine.gpus:
        peak = machine.host.cpu_peak_tflops_fp32
        if not peak:
            return None, "no CPU peak (host.cpu_peak_tflops_fp32)"
        share = peak * hardware.TFLOPS / setup.ranks  # the ranks share the host's cores
        seconds = rates.CPU_ARITHMETIC.seconds(sum(forward.values()), share)
        return (
            seconds,
            f"a rank's share of the probe's fp32 peak {peak:.4g} TFLOP/s x ({rates.CPU_ARITHMETIC.source})",
        )
    slowest: Seconds = (0.0, 0.0)
    sources = []
    for gpu in machine.gpus:
        found = hardware.peak(gpu.name, setup.dtype)
        if found is None:
            return None, f"no {setup.dtype} peak for {gpu.name} in zerogate.hardware"
        peak = found.tflops * hardware.TFLOPS
        seconds = _added(
            rates.GPU_MATMUL.seconds(forward["matmul"], peak),
            rates.GPU_ATTENTION.seconds(forward["attention"], peak),
        )
        assert seconds is not None and slowest is not None
        slowest = (max(slowest[0], seconds[0]), max(slowest[1], seconds[1]))
        sources.append(f"{gpu.name} {found.tflops:g} TFLOP/s ({found.source})")
    rate = (
        f"peak {'; '.join(dict.fromkeys(sources))}; matmul x ({rates.GPU_MATMUL.source}); attention x "
        f"({rates.GPU_ATTENTION.source})"
    )
    return slowest, rate


def compute_terms(counts: ModelCounts, setup: Setup, machine: MachineDescription) -> list[Term]:
    """Forward, backward (twice the forward's FLOP) and recomputation (the forward again, with activation
    checkpointing) per optimizer step."""
    forward, rate = _pass_seconds(counts, setup, machine)
    g = setup.accumulation
    flop = "FLOP: zerogate.hardware.training_flops_per_token by kind, the forward a third"
    terms = [
        Term("forward", COMPUTE, MICRO_STEP, _scaled(forward, g), False, f"{flop}; {rate}"),
        Term(
            "backward",
            COMPUTE,
            MICRO_STEP,
            _scaled(forward, 2 * g),
            False,
            f"{flop}, the backward two; {rate}",
        ),
    ]
    if setup.activation_checkpointing:
        terms.append(
            Term(
                "recomputation",
                COMPUTE,
                MICRO_STEP,
                _scaled(forward, g),
                False,
                "full activation checkpointing runs the forward again (training_flops_per_token "
                f"recompute); {rate}",
            )
        )
    return terms


def overlap_comm_on(setup: Setup) -> bool:
    """DeepSpeed's overlap_comm for the run: the config's, else its stage's default (zero/config.py
    ``overlap_comm_valid``: on at stage 3 only)."""
    return setup.overlap_comm_given if setup.overlap_comm_given is not None else setup.stage == 3


def overlaps(setup: Setup, machine: MachineDescription) -> bool:
    """Whether DeepSpeed runs ZeRO-3's gathers and reductions beside the compute on this run (module doc)."""
    asynchronous = bool(machine.gpus) and setup.device_kind != "cpu"
    return asynchronous and setup.stage == 3 and overlap_comm_on(setup) and setup.prefetch_bucket > 0


def _pcie(machine: MachineDescription) -> tuple[float | None, str]:
    """The slowest rank's PCIe rate (GB/s per direction) and its name, None where a link is unknown."""
    links = [(pcie_gbps(g.pcie), g.name) for g in machine.gpus]
    if not links or any(rate is None for rate, _ in links):
        return None, "no PCIe generation and width for every device"
    rate, name = min(links, key=lambda item: item[0] or 0.0)
    return rate, f"{name} PCIe {rate:.4g} GB/s per direction (zerogate.predict.floor.pcie_gbps)"


def _collective_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, overlap: bool
) -> list[Term]:
    """Each collective kind per micro-step (x G) and per boundary: the floor's time at the machine's figures
    (low) and at COLLECTIVE_BANDWIDTH.low of the bandwidth (high). With the overlap rule, a micro-step's
    gathers leave their first prefetch bucket exposed and its reductions their last reduce bucket."""
    found = theory_terms(counts, setup)
    terms = []
    for per, times in ((MICRO_STEP, setup.accumulation), (BOUNDARY, 1)):
        timed = collective_time(found, per, setup.ranks, machine)
        for kind, part in timed.kinds.items():
            seconds: Seconds = None
            if part.transfer_time_s is not None:
                # A latency nobody gives is left out (named in the source): the term is then too low.
                latency, transfer = part.latency_time_s or 0.0, part.transfer_time_s
                seconds = (latency + transfer, latency + transfer / rates.COLLECTIVE_BANDWIDTH.low)
            figures = ", ".join(
                f"{name} {fig.value:.4g} ({fig.basis}: {fig.source})"
                for name, fig in (("latency s", part.latency), ("bandwidth GB/s", part.bandwidth))
                if fig is not None
            ) + ("" if part.latency is not None else "; no latency figure: left out")
            source = (
                f"zerogate.predict.comms theory: {part.calls:g} calls, {part.volume_bytes:.4g} B per {per} "
                f"(zerogate.predict.volume); {figures or 'no figure'}; high at "
                f"{rates.COLLECTIVE_BANDWIDTH.low:g} of the bandwidth ({rates.COLLECTIVE_BANDWIDTH.source})"
            )
            in_step = per == MICRO_STEP and overlap and kind != "all_reduce"
            exposed = None
            if in_step and seconds is not None and part.volume_bytes:
                bucket = setup.prefetch_bucket if kind == "all_gather" else setup.reduce_bucket
                elements = part.volume_bytes / setup.dtype_bytes
                exposed = _scaled(seconds, times * min(1.0, bucket / elements) / max(part.calls, 1.0))
            terms.append(
                Term(
                    f"{kind.replace('_', '-')}s per {'micro-step' if per == MICRO_STEP else 'boundary'}",
                    COLLECTIVE,
                    per,
                    _scaled(seconds, times),
                    in_step,
                    source,
                    exposed,
                    "" if part.latency is not None or not part.calls else "latency (no figure)",
                )
            )
    return terms


def _copy_rate(setup: Setup) -> rates.Achievable:
    return rates.PCIE_PINNED if setup.pin_memory else rates.PCIE_PAGEABLE


def host_copy_bytes(counts: ModelCounts, setup: Setup) -> dict[str, float]:
    """Bytes one rank copies between host and device per optimizer step for its offloads (module doc):
    ``parameters h2d`` (parameter offload: its partition of every gathered parameter, every micro-step),
    ``gradients d2h`` and ``gradients h2d`` (optimizer offload: the reduced partition out every micro-step,
    back in every micro-step after the first), ``updated partition h2d`` (optimizer offload without
    parameter offload: the updated 16-bit partition after the update, at the boundary)."""
    g, n, b = setup.accumulation, setup.ranks, setup.dtype_bytes
    partition = counts.partition_numel(n) if setup.stage == 3 else counts.total / n
    moved: dict[str, float] = {}
    if setup.stage == 3 and setup.offload_param:
        gathers = zero3_gathers(
            counts, n, setup.persistence_threshold, setup.max_reuse_distance, setup.leaf_blocks
        )
        moved["parameters h2d"] = g * sum(gathers.values()) / n * b
    if setup.offload_optimizer:
        moved["gradients d2h"] = g * partition * GRAD_ACCUMULATION_BYTES
        moved["gradients h2d"] = (g - 1) * partition * GRAD_ACCUMULATION_BYTES
        if not setup.offload_param:
            moved["updated partition h2d"] = partition * b
    return moved


def host_copy_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, overlap: bool
) -> list[Term]:
    """The offloads' host <-> device copies at the slowest rank's PCIe rate x the pinned or pageable
    fraction; the micro-step's copies run on the gather / reduce streams (overlapped under the rule), the
    updated partition's after the update (serial)."""
    if not machine.gpus:
        return []  # the CPU accelerator's "device" is host memory: no copies
    link, link_source = _pcie(machine)
    fraction = _copy_rate(setup)
    kind = "pinned" if setup.pin_memory else "pageable"
    terms = []
    for name, moved in host_copy_bytes(counts, setup).items():
        per = BOUNDARY if name.startswith("updated") else MICRO_STEP
        seconds = None if link is None else fraction.seconds(moved, link * 1e9)
        terms.append(
            Term(
                f"{name} ({kind})",
                HOST_COPY,
                per,
                seconds,
                overlap and per == MICRO_STEP,
                f"{moved:.4g} B per optimizer step (stage3.py partition_grads, partitioned_param_coordinator "
                f"fetches, _reassign_or_swap_out_partitioned_parameters); {link_source}; "
                f"x ({fraction.source})",
            )
        )
    return terms


def _partition(counts: ModelCounts, setup: Setup) -> float:
    """Elements of one rank's optimizer partition (every parameter without ZeRO)."""
    if setup.stage == 0:
        return counts.total
    return counts.partition_numel(setup.ranks) if setup.stage == 3 else counts.total / setup.ranks


def _memory_bound(
    moved_per_rank: float, setup: Setup, machine: MachineDescription, on_host: bool
) -> tuple[Seconds, str]:
    """(low, high) seconds to stream ``moved_per_rank`` bytes on every rank: over the host's memory (all
    ranks' traffic on one host's bandwidth) or each device's (the slowest device deciding)."""
    if on_host:
        bandwidth = machine.host.memory_bandwidth_gbps
        if not bandwidth:
            return None, "no host memory bandwidth (host.memory_bandwidth_gbps)"
        moved = moved_per_rank * setup.ranks_per_node
        return rates.HOST_MEMORY.seconds(moved, bandwidth * 1e9), (
            f"{setup.ranks_per_node} rank(s) x {moved_per_rank:.4g} B over the host's {bandwidth:g} GB/s x "
            f"({rates.HOST_MEMORY.source})"
        )
    bandwidths = [g.memory_bandwidth_gbps for g in machine.gpus]
    if not all(bandwidths):
        return None, "no memory bandwidth for every device (gpus[].memory_bandwidth_gbps)"
    slowest = min(b for b in bandwidths if b)
    return rates.DEVICE_MEMORY.seconds(moved_per_rank, slowest * 1e9), (
        f"{moved_per_rank:.4g} B per rank over the slowest device's {slowest:g} GB/s x "
        f"({rates.DEVICE_MEMORY.source})"
    )


def boundary_terms(counts: ModelCounts, setup: Setup, machine: MachineDescription) -> list[Term]:
    """The optimizer update and the gradient norm and unscale, serial at the boundary (stage3.py ``step``)."""
    on_host = setup.offload_optimizer or not machine.gpus
    partition = _partition(counts, setup)
    adam, adam_rate = _memory_bound(
        partition * adam_bytes_per_param(setup.dtype_bytes), setup, machine, on_host
    )
    norm, norm_rate = _memory_bound(partition * NORM_BYTES_PER_ELEMENT, setup, machine, on_host)
    adam_name = "CPU Adam update" if on_host else "fused Adam update on the device"
    return [
        Term(
            adam_name,
            OPTIMIZER,
            BOUNDARY,
            adam,
            False,
            f"{adam_bytes_per_param(setup.dtype_bytes)} B per parameter of the partition "
            f"(zerogate.predict.floor.adam_bytes_per_param: ops/adam/cpu_adam.py -> csrc/adam Step_AVX, or "
            f"the fused multi-tensor Adam); {adam_rate}",
        ),
        Term(
            "gradient norm and unscale",
            SERIAL,
            BOUNDARY,
            norm,
            False,
            f"{NORM_BYTES_PER_ELEMENT} B per gradient element (stage3.py _get_norm_groups reads the fp32 "
            f"partition, unscale_and_clip_grads reads and writes it); {norm_rate}",
        ),
    ]


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


def _micro_step(terms: list[Term], nvlink: bool, at: int) -> tuple[float, dict[str, float]]:
    """Seconds of the micro-step terms per optimizer step at bound ``at`` (0 low, 1 high) under the overlap
    rule, and what each term contributes (``at`` 2: the middle of low and high)."""

    def value(seconds: Seconds) -> float:
        if seconds is None:
            return 0.0
        return _mid(seconds) if at == 2 else seconds[at]

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


def step_time(counts: ModelCounts, setup: Setup, machine: MachineDescription) -> StepTime:
    """The predicted optimizer-step time of ``setup`` on ``machine``: every term (module doc), the interval
    (low, high) under the overlap rule, and the term that decides it."""
    overlap = overlaps(setup, machine)
    terms = (
        compute_terms(counts, setup, machine)
        + _collective_terms(counts, setup, machine, overlap)
        + host_copy_terms(counts, setup, machine, overlap)
        + boundary_terms(counts, setup, machine)
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
