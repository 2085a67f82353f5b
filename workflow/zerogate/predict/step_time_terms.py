"""The terms of the step-time ledger (zerogate.predict.step_time, whose docstring says what each is and
where it comes from): each a (low, high) seconds per optimizer step from its work and its rate, with the
rate's source; on this machine the micro-benchmarks' measured rates where they have one
(zerogate.predict.microbench_rates.MeasuredRates), else the peaks x the achievable fractions of
zerogate.predict.rates."""

from __future__ import annotations

from dataclasses import dataclass

from zerogate import hardware
from zerogate.config.card_figures import gpu_peak
from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import CollectivePart
from zerogate.predict import rates
from zerogate.predict.collectives import DERIVED, BeyondLine
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.fetch_trace import zero3_gathers
from zerogate.predict.floor import (
    collective_time,
    counted_product_parameters,
    latency_seconds,
    measured_beyond,
    pcie_gbps,
    theory_terms,
)
from zerogate.predict.microbench_rates import REPEAT_RANGE, MeasuredRates, Rate
from zerogate.predict.nccl_latency import gpu_latency
from zerogate.predict.setup import Setup

COMPUTE, COLLECTIVE, HOST_COPY, OPTIMIZER, SERIAL, HOST_WORK = (
    "compute",
    "collective",
    "host_copy",
    "optimizer",
    "serial",
    "host_work",  # the host's own work beside a GPU's kernels (zerogate.predict.step_time_modules)
)
# Bytes of one gradient element where DeepSpeed accumulates and offloads it (gradient_accumulation_dtype:
# fp32 for 16-bit training, stage3.py ``grad_partitions_flat_buffer``).
GRAD_ACCUMULATION_BYTES = 4
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
        "matmul": hardware.training_flops_per_token(counted_product_parameters(counts), 0, 0, setup.seq_len)
        * tokens,
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
        seconds = _added(
            rates.CPU_ARITHMETIC.seconds(forward["matmul"], share),
            _share_of(setup, rates.CPU_ARITHMETIC.seconds(forward["attention"], share)),
        )
        return (
            seconds,
            f"a rank's share of the probe's fp32 peak {peak:.4g} TFLOP/s x ({rates.CPU_ARITHMETIC.source})"
            + _attention_note(setup),
        )
    slowest: Seconds = (0.0, 0.0)
    sources = []
    for gpu in machine.gpus:
        # The floor's peak: the description's stated figure, else the card catalogue's (one definition).
        found = gpu_peak(machine, gpu, setup.dtype)
        if found.tflops is None:
            return None, f"no {setup.dtype} peak: {found.source}"
        peak = found.tflops * hardware.TFLOPS
        seconds = _added(
            rates.GPU_MATMUL.seconds(forward["matmul"], peak),
            _share_of(setup, rates.GPU_ATTENTION.seconds(forward["attention"], peak)),
        )
        assert seconds is not None and slowest is not None
        slowest = (max(slowest[0], seconds[0]), max(slowest[1], seconds[1]))
        sources.append(f"{gpu.name} {found.tflops:g} TFLOP/s ({found.source})")
    rate = (
        f"peak {'; '.join(dict.fromkeys(sources))}; matmul x ({rates.GPU_MATMUL.source}); attention x "
        f"({rates.GPU_ATTENTION.source})" + _attention_note(setup)
    )
    return slowest, rate


PACKED = (
    "; the samples packed into each row attend within themselves, their lengths unknown: the attention's "
    "FLOP from none to one sequence of the row's length"
)


def _attention_note(setup: Setup) -> str:
    """What the attention's seconds took: the share its kernel computes, and packing where the row packs."""
    least, most = setup.attention_share
    return (
        f"; the attention's FLOP x {least:.3g}-{most:.3g}, the share of its whole count a causal "
        f"{setup.attention_counted} kernel computes (zerogate.hardware.causal_attention_share)"
    ) + (PACKED if setup.packed_samples else "")


def _share_of(setup: Setup, attention: tuple[float, float]) -> tuple[float, float]:
    """The attention's (low, high) seconds at its whole FLOP count, scaled by the share its kernel computes
    (Setup.attention_share), the low end none where the row packs samples that attend within themselves
    (Setup.packed_samples)."""
    least, most = setup.attention_share
    return (0.0 if setup.packed_samples else attention[0] * least, attention[1] * most)


def _measured_passes(
    counts: ModelCounts, setup: Setup, measured: MeasuredRates
) -> tuple[Seconds, Seconds, str]:
    """(forward, backward) seconds of one micro-step from the micro-benchmarks: the run's linear layers'
    products as timed, the attention's FLOP at the same products' measured rate."""
    attention = flop_by_kind(counts, setup)["attention"]

    def at(flop: float, rate: Rate) -> tuple[float, float]:
        return flop / rate.high, flop / rate.low

    fwd, bwd = measured.linear_forward_s, measured.backward_flop_per_s
    forward = _added((fwd.low, fwd.high), _share_of(setup, at(attention / 3, measured.forward_flop_per_s)))
    back = measured.linear_backward_s
    backward = _added((back.low, back.high), _share_of(setup, at(2 * attention / 3, bwd)))
    source = (
        f"measured: {fwd.source} ({REPEAT_RANGE}), with {measured.threads} thread(s); the "
        "attention's FLOP (zerogate.hardware.training_flops_per_token by kind) at those products' measured "
        "rate" + _attention_note(setup)
    )
    return forward, backward, source


def compute_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, measured: MeasuredRates | None = None
) -> list[Term]:
    """Forward, backward (twice the forward's FLOP) and recomputation (the forward again, with activation
    checkpointing) per optimizer step; with ``measured``, the micro-benchmarks' products instead of a peak.
    On a synchronised device (the CPU accelerator) the host also runs every operator's dispatch and the
    engine's module hooks between the products (zerogate.predict.compute's docstring: most of a small
    model's micro-step there): zerogate.predict.step_time_modules."""
    g = setup.accumulation
    if measured is not None:
        forward, backward, rate = _measured_passes(counts, setup, measured)
        flop = "the forward's products"
    else:
        forward, rate = _pass_seconds(counts, setup, machine)
        backward = _scaled(forward, 2)
        flop = (
            "FLOP: zerogate.hardware.training_flops_per_token by kind, the forward a third, the backward two"
        )
    terms = [
        Term("forward", COMPUTE, MICRO_STEP, _scaled(forward, g), False, f"{flop}; {rate}"),
        Term("backward", COMPUTE, MICRO_STEP, _scaled(backward, g), False, f"{flop}; {rate}"),
    ]
    if setup.activation_checkpointing:
        terms.append(
            Term(
                "recomputation",
                COMPUTE,
                MICRO_STEP,
                _scaled(forward, g),
                False,
                f"full activation checkpointing runs the forward again; {rate}",
            )
        )
    return terms


def host_runs_between_products(setup: Setup, machine: MachineDescription) -> bool:
    """Whether the host runs a micro-step's work between the products one after another (a synchronised
    device: DeepSpeed's CPU accelerator, or no GPU at all), so the ledger has terms for the host's per-module
    work and functional operators; on a GPU the host's work runs beside the kernels (a term of its own:
    zerogate.predict.step_time_modules)."""
    return not machine.gpus or setup.device_kind == "cpu"


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


def slow_transfer(part: CollectivePart, transfer: float) -> float:
    """A collective's transfer at the interval's slow end: its volume at COLLECTIVE_BANDWIDTH.low of the
    bandwidth figure (assumed), or at the figure's own slow end where the probe measured one that is slower
    (the slowest repeat's line, zerogate.predict.collectives.figures): what is uncertain of a measured
    bandwidth is its spread between repeats as much as the fraction a run reaches."""
    high = transfer / rates.COLLECTIVE_BANDWIDTH.low
    bandwidth = part.bandwidth
    if bandwidth is None or bandwidth.low is None or not part.volume_bytes:
        return high
    return max(high, part.volume_bytes / (bandwidth.low * 1e9))


def transfer_seconds(part: CollectivePart, beyond: BeyondLine | None) -> tuple[float, float] | None:
    """(low, high) seconds of a part's volume on the wire. Without ``beyond``: the volume at the bandwidth
    figure, its slow end by :func:`slow_transfer`. With it: each call's bytes up to the line's last size at
    the figure, the rest at the probe's rate beyond it (``BeyondLine.split``); the slow end the larger of
    COLLECTIVE_BANDWIDTH.low of that and both parts at their slowest repeats. None: no bandwidth figure."""
    transfer, bandwidth = part.transfer_time_s, part.bandwidth
    if transfer is None:
        return None
    if beyond is None or bandwidth is None or not part.volume_bytes:
        return transfer, slow_transfer(part, transfer)
    near, far = beyond.split(part.calls, part.volume_bytes)
    low = near / (bandwidth.value * 1e9) + far / beyond.bandwidth
    slow_near = bandwidth.value if bandwidth.low is None else bandwidth.low
    slow_far = beyond.bandwidth if beyond.slow_bandwidth is None else beyond.slow_bandwidth
    return low, max(low / rates.COLLECTIVE_BANDWIDTH.low, near / (slow_near * 1e9) + far / slow_far)


def collective_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, overlap: bool
) -> list[Term]:
    """Each collective kind per micro-step (x G) and per boundary: the floor's time at the machine's figures
    (low) and at :func:`slow_transfer` (high). With the overlap rule, a micro-step's
    gathers leave their first prefetch bucket exposed and its reductions their last reduce bucket."""
    found = theory_terms(counts, setup)
    terms = []
    for per, times in ((MICRO_STEP, setup.accumulation), (BOUNDARY, 1)):
        timed = collective_time(found, per, setup.ranks, machine)
        for kind, part in timed.kinds.items():
            seconds: Seconds = None
            # Between nodes the ring crosses the network: a bandwidth derived from the GPUs' links (the
            # floor's upper bound) says nothing of it, so the term waits for the description's network (its
            # figure is then the slower of the two: zerogate.predict.floor.across_nodes).
            across_nodes = (
                setup.nodes > 1
                and machine.network is None
                and part.bandwidth is not None
                and part.bandwidth.basis == DERIVED
            )
            # A latency the description does not give is NCCL's model of it on a GPU box
            # (zerogate.predict.nccl_latency); one nobody gives is left out (named in the source): the term
            # is then too low.
            latency_figure = part.latency or gpu_latency(kind, setup, machine)
            beyond = measured_beyond(machine, kind, setup.nodes, setup.ranks)
            transfer = transfer_seconds(part, beyond)
            if transfer is not None and not across_nodes:
                # A latency given as an interval adds its low end to the low, its high end to the high.
                latency, latency_high = (
                    (0.0, 0.0)
                    if latency_figure is None
                    else (
                        latency_seconds(part.calls, latency_figure),
                        latency_seconds(part.calls, latency_figure, "high"),
                    )
                )
                seconds = (latency + transfer[0], latency_high + transfer[1])
            figures = ", ".join(
                f"{name} {'' if fig.low is None else f'{fig.low:.4g}..'}{fig.value:.4g}"
                f"{'' if fig.high is None else f'..{fig.high:.4g}'} "
                f"({fig.basis}: {fig.source})"
                for name, fig in (("latency s", latency_figure), ("bandwidth GB/s", part.bandwidth))
                if fig is not None
            ) + ("" if latency_figure is not None else "; no latency figure: left out")
            if beyond is not None:
                figures += f"; {beyond.source}"
            if across_nodes:
                figures += "; across nodes: no network figure (the description's network gives one)"
            source = (
                f"zerogate.predict.comms theory: {part.calls:g} calls, {part.volume_bytes:.4g} B per {per} "
                f"(zerogate.predict.volume); {figures or 'no figure'}; high at "
                f"{rates.COLLECTIVE_BANDWIDTH.low:g} of the bandwidth ({rates.COLLECTIVE_BANDWIDTH.source}), "
                "or at a measured bandwidth's slowest repeat where that is slower"
            )
            in_step = per == MICRO_STEP and overlap and kind != "all_reduce"
            exposed = None
            if in_step and seconds is not None and part.volume_bytes:
                bucket = setup.prefetch_bucket if kind == "all_gather" else setup.reduce_bucket
                elements = part.volume_bytes / setup.dtype_bytes
                # One bucket's share of the micro-step's calls of this kind stays on the critical path.
                exposed = _scaled(seconds, times * min(1.0, bucket / elements))
            terms.append(
                Term(
                    f"{kind.replace('_', '-')}s per {'micro-step' if per == MICRO_STEP else 'boundary'}",
                    COLLECTIVE,
                    per,
                    _scaled(seconds, times),
                    in_step,
                    source,
                    exposed,
                    "" if latency_figure is not None or not part.calls else "latency (no figure)",
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


def _copy_seconds(
    moved: float, name: str, setup: Setup, machine: MachineDescription, measured: MeasuredRates | None
) -> tuple[Seconds, str]:
    """(low, high) seconds of ``moved`` bytes in the copy's direction: the micro-benchmarks' copy where they
    timed that route, else the slowest rank's PCIe rate x the pinned or pageable fraction."""
    route = "host_to_device" if "h2d" in name else "device_to_host"
    rate = None if measured is None else measured.copy(route, setup.pin_memory)
    if rate is not None:
        return (moved / rate.high, moved / rate.low), f"measured: {rate.source} ({REPEAT_RANGE})"
    if not machine.gpus:
        # The CPU accelerator's device is host memory: a copy reads and writes it (the description's
        # bandwidth counts both), every rank's at once.
        bandwidth = machine.host.memory_bandwidth_gbps
        if not bandwidth:
            return None, "no host memory bandwidth (host.memory_bandwidth_gbps)"
        moved_all = 2 * moved * setup.ranks_per_node
        return rates.HOST_MEMORY.seconds(moved_all, bandwidth * 1e9), (
            f"host memory to host memory, read and written, {setup.ranks_per_node} rank(s) over the host's "
            f"{bandwidth:g} GB/s x ({rates.HOST_MEMORY.source})"
        )
    link, link_source = _pcie(machine)
    fraction = _copy_rate(setup)
    seconds = None if link is None else fraction.seconds(moved, link * 1e9)
    return seconds, f"{link_source} x ({fraction.source})"


def host_copy_terms(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    overlap: bool,
    measured: MeasuredRates | None = None,
) -> list[Term]:
    """The offloads' host <-> device copies (_copy_seconds); the micro-step's copies run on the gather /
    reduce streams (overlapped under the rule), the updated partition's after the update (serial). On the CPU
    accelerator DeepSpeed's offload copies one host buffer into another, serially."""
    kind = "pinned" if setup.pin_memory else "pageable"
    terms = []
    if setup.nvme_optimizer or setup.nvme_param:
        terms.append(
            Term(
                "NVMe swaps",
                HOST_COPY,
                MICRO_STEP,
                None,
                False,
                "DeepSpeed's swapper (zero/swap_tensor) reads and writes the offloaded states on NVMe: no "
                "figure for the drive in a machine description",
            )
        )
    for name, moved in host_copy_bytes(counts, setup).items():
        per = BOUNDARY if name.startswith("updated") else MICRO_STEP
        seconds, rate = _copy_seconds(moved, name, setup, machine, measured)
        terms.append(
            Term(
                f"{name} ({kind})",
                HOST_COPY,
                per,
                seconds,
                overlap and per == MICRO_STEP,
                f"{moved:.4g} B per optimizer step (stage3.py partition_grads, partitioned_param_coordinator "
                f"fetches, _reassign_or_swap_out_partitioned_parameters); {rate}",
            )
        )
    return terms


def optimizer_partition(counts: ModelCounts, setup: Setup) -> float:
    """Elements of one rank's optimizer partition (every parameter without ZeRO)."""
    if setup.stage == 0:
        return counts.total
    return counts.partition_numel(setup.ranks) if setup.stage == 3 else counts.total / setup.ranks
