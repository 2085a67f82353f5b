"""The throughput floor: the shortest micro-step and optimizer step a machine could possibly run.

Every term uses a published or measured peak (never an achievable fraction), and resources that can work
at the same time are assumed to overlap perfectly, so measured time / floor >= 1 always; how far above 1
a run lands is the honest way to judge a step-time claim (docs/reference.md section 2).

Per micro-step and rank: compute (FLOP / peak; on the CPU accelerator also the model's own forward +
backward through the run's DeepSpeed engine in a one-rank world, timed alone on this machine,
zerogate.predict.compute, because there a small model is bound by operator and hook overheads rather than
arithmetic), the host<->device PCIe link in each direction (parameter
streaming with offload, collectives, gradient offload), the collectives between the ranks, and the slowest
rank decides; these resources can work at once, so the micro-step floor is the largest of them, never
their sum, except along a dependency: where the theory has one all-gather per micro-step (every parameter
gathered in one call, ZeRO-3 with a prefetch bucket larger than the model) the forward cannot start before
it ends, and where it has one gradient reduction per micro-step (one bucket) that cannot start before the
backward ends, so compute + those calls is a term of its own (``compute + dependent collectives(s)``).
Per optimizer step: accumulation x micro-step, plus the boundary's collectives and the optimizer update (CPU
Adam is bound by host memory traffic), which DeepSpeed runs one after the other after the last
micro-step (the update needs the reduced gradients; the boundary's gathers need the updated partitions),
so those add.

Collectives (``communication``): the theory's calls and volume per micro-step and per boundary for the run's
scheme (zerogate.predict.comms.theory, added up by zerogate.predict.comms_terms.totals with the one definition
of volume), per collective kind ``calls x latency + volume / bandwidth``. The figures are the machine's
(zerogate.predict.collectives): on the CPU accelerator the probe's gloo measurement between two local ranks;
on GPUs a measured NCCL figure where the probe or description gives one, a published one from the description,
or a bandwidth derived from the ranks' PCIe links (through host memory or peer-to-peer: the slowest rank's
link per direction); each figure carries its basis (measured, published, derived) and source. Latencies are
the smallest measured (or published) per call and bandwidths peaks, so the term stays a lower bound; the calls
of one process group are taken one after another. A figure nobody gives is missing: its part is left out and
listed in ``missing``, never assumed.
"""

from __future__ import annotations

from zerogate import hardware
from zerogate.config.card_figures import gpu_bandwidth, gpu_peak
from zerogate.config.machines import FigureDescription, MachineDescription, PcieLink
from zerogate.contracts.machine import CollectiveKindFigures, Figure
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import (
    CollectivePart,
    CollectiveTime,
    Floor,
    FloorCommunication,
    FloorRank,
    LinkBytes,
    ModelComputeMeasurement,
    TheoryTermRow,
)
from zerogate.predict.collectives import DERIVED, BeyondLine, beyond_line
from zerogate.predict.comms import TheoryInputs, theory
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP, Term, totals
from zerogate.predict.setup import Setup
from zerogate.render.comms_runs import scheme_for

# GB/s per lane and direction after line encoding (PCI-SIG: 8b/10b for Gen 1-2, 128b/130b from Gen 3).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Memory bytes one Adam update must move per parameter, at least (DeepSpeed's CPU Adam, csrc/adam
# cpu_adam_impl.cpp Step_AVX; the fused device Adam moves the same): it reads the fp32 param, grad
# (ZeRO keeps the partition's gradients in fp32), exp_avg and exp_avg_sq (4 x 4 = 16 B) and writes back
# param, exp_avg and exp_avg_sq (3 x 4 = 12 B): 28 B. With 16-bit training it also writes the 16-bit
# copy of the param (+2 B = 30 B); in fp32 there is none. Anything DeepSpeed adds (a separate copy pass
# that rereads the fp32 param) is left out, so the floor stays a lower bound. docs/reference.md section 2's
# ~36 B/param is that looser estimate.
ADAM_STATE_BYTES_PER_PARAM = 4 * 4 + 3 * 4


def adam_bytes_per_param(dtype_bytes: int) -> int:
    """Bytes one Adam update moves per parameter at least: 28, plus the 16-bit param copy when training in
    16-bit (``dtype_bytes`` < 4)."""
    return ADAM_STATE_BYTES_PER_PARAM + (dtype_bytes if dtype_bytes < 4 else 0)


def pcie_gbps(pcie: PcieLink | None) -> float | None:
    """A PCIe link's bandwidth per direction in GB/s (None where its generation or width is unknown)."""
    if pcie is None or not pcie.generation or not pcie.width:
        return None
    return PCIE_LANE_GBPS.get(pcie.generation, max(PCIE_LANE_GBPS.values())) * pcie.width


def link_bytes(counts: ModelCounts, setup: Setup, nvlink: bool = False) -> dict[str, float]:
    """Bytes one rank moves over its host link per micro-step, host-to-device and device-to-host.

    Without NVLink every collective between the devices crosses the PCIe links: through host memory without
    peer-to-peer, and peer-to-peer over PCIe through the switch or root port (each byte still crosses the
    sender's and the receiver's link), so it is counted on the link either way. With NVLink (``nvlink``: the
    machine description's ``nvlink``) NCCL sends them over NVLink (its NVLS / P2P transports, which it prefers
    to the PCIe path: NCCL's environment documentation, NCCL_P2P_LEVEL), so only the host copies are left on
    the link: counting the collectives there would make the floor higher than a real step on such a box.
    """
    phi, b, n = counts.total, setup.dtype_bytes, setup.ranks
    others = 0.0 if nvlink else (n - 1) / n
    h2d = d2h = 0.0
    if setup.stage == 3:
        # Forward and backward each gather the full model onto every device (docs/reference.md section 2):
        # with parameter offload the whole model comes from host memory.
        h2d += 2 * phi * b if setup.offload_param else 2 * phi * b * others
        h2d += phi * b * others  # reduce-scatter: the other ranks' gradient shards arrive
        d2h += phi * b * others
    elif setup.stage == 2:
        h2d += phi * b * others
        d2h += phi * b * others
    # ZeRO-0/1 reduce once per optimizer step: counted in optimizer_step_bytes.
    if setup.offload_optimizer and setup.stage >= 2:
        d2h += 4 * counts.partition_numel(n)  # fp32 gradient partition to the host buffer, every micro-step
    return {"h2d": h2d, "d2h": d2h}


def theory_scheme(setup: Setup) -> str:
    """The zerogate.predict.comms scheme of a run: its ZeRO stage and offloads
    (zerogate.render.comms_runs.scheme_for)."""
    return scheme_for(setup.stage, setup.offload_optimizer, setup.offload_param)


def theory_terms(counts: ModelCounts, setup: Setup) -> list[Term]:
    """The theory's collectives for the run: zerogate.predict.comms.theory for its scheme, accumulation,
    world and dtype, with the rendered config's bucket, reuse and leaf settings (the others DeepSpeed's
    defaults)."""
    inputs = TheoryInputs(
        accumulation=setup.accumulation,
        world=setup.ranks,
        dtype_bytes=setup.dtype_bytes,
        persistence_threshold=setup.persistence_threshold,
        reduce_bucket_elements=setup.reduce_bucket,
        prefetch_bucket_elements=setup.prefetch_bucket,
        max_reuse_distance=setup.max_reuse_distance,
        leaf_blocks=setup.leaf_blocks,
    )
    return theory(counts, theory_scheme(setup), inputs)


def derived_bandwidth(machine: MachineDescription) -> Figure | None:
    """A collective bandwidth derived from the GPUs' PCIe links when nothing better is given: through host
    memory (no peer-to-peer) each byte crosses the sender's link to host memory and the receiver's from it,
    peer-to-peer it crosses both links directly; either way a rank's ring traffic, sent and received at
    once, is bounded by the slowest link's per-direction bandwidth. None without GPUs, with NVLink (its
    bandwidth depends on the generation: give it in the description) or without link figures."""
    gpus = machine.gpus
    if not gpus or machine.nvlink:
        return None
    links = [(pcie_gbps(g.pcie), g) for g in gpus]
    known = [(rate, gpu) for rate, gpu in links if rate is not None]
    if len(known) < len(links):
        return None
    rate, slowest = min(known, key=lambda item: item[0])
    assert slowest.pcie is not None  # its rate is known
    route = "peer-to-peer over PCIe" if machine.peer_to_peer else "through host memory (no peer-to-peer)"
    return Figure(
        value=rate,
        basis=DERIVED,
        source=f"{route}: the slowest rank's link, {slowest.name} PCIe "
        f"{slowest.pcie.generation}.0 x{slowest.pcie.width} = {rate:.4g} GB/s "
        "per direction (PCI-SIG lane rate after encoding)",
    )


def given_figure(described: FigureDescription | None) -> Figure | None:
    """A figure of the machine's description as the plan writes it (value, basis, source)."""
    return None if described is None else Figure.model_validate(described.model_dump(mode="json"))


# NCCL's model of a ring's bus bandwidth across nodes: its channels times the inter-node bandwidth a channel
# gets (ncclTopoTuneModel, ``busBw = nChannels * bw`` with ``bw = bwInter``), the node's network adapters
# shared by the channels: a rank's volume crosses at the slower of the GPUs' link and the node's network.
RING_ACROSS_NODES = (
    "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/graph/tuning.cc"
)


def across_nodes(inside: Figure | None, machine: MachineDescription) -> Figure | None:
    """The bandwidth of a rank's volume in a ring over ``machine``'s nodes: the slower of the GPUs' link
    (``inside``) and the node's network (its description's ``network``), at each end (the fast end
    ``value``, the slow end ``low``); None where either is unknown."""
    network = machine.network
    if inside is None or network is None:
        return None
    net = Figure.model_validate(network.bandwidth_gbps.model_dump(mode="json"))
    value = min(inside.value, net.value)
    slow = min(inside.value if inside.low is None else inside.low, net.value if net.low is None else net.low)
    binding = net if net.value <= inside.value else inside
    return Figure(
        value=value,
        basis=binding.basis,
        low=slow if slow < value else None,
        source=(
            f"a ring over {machine.nodes} nodes at the slower of the GPUs' link ({inside.value:.4g} GB/s: "
            f"{inside.source}) and the node's network ({network.kind}: "
            f"{'' if net.low is None else f'{net.low:.4g} to '}{net.value:.4g} GB/s, {net.source}) "
            f"({RING_ACROSS_NODES}: ncclTopoTuneModel's busBw across nodes)"
        ),
    )


def collective_figures(machine: MachineDescription, kind: str) -> CollectiveKindFigures:
    """latency_s and bandwidth_gbps figures of one collective kind on ``machine`` (None where unknown): the
    description's, the bandwidth else derived from the PCIe links; over several nodes with a network
    described, the slower of that and the network (:func:`across_nodes`)."""
    given = None if machine.collectives is None else machine.collectives.kinds.get(kind)
    latency = None if given is None else given_figure(given.latency_s)
    bandwidth = None if given is None else given_figure(given.bandwidth_gbps)
    if bandwidth is None:
        bandwidth = derived_bandwidth(machine)
    if machine.nodes > 1 and machine.network is not None:
        bandwidth = across_nodes(bandwidth, machine)
    return CollectiveKindFigures(latency_s=latency, bandwidth_gbps=bandwidth)


# The measured term of a CPU rank's compute: the model's own forward + backward through the run's DeepSpeed
# engine on one rank (zerogate.predict.compute).
EAGER_PASS = "model forward + backward on one rank, measured(s)"

# Collectives that sit on a micro-step's dependency path when the theory has one call of them per
# micro-step: that one call gathers every parameter before the forward's first operation can run, or
# reduces every gradient after the backward's last one has produced it. Nothing overlaps them.
BEFORE_COMPUTE = ("all_gather",)
AFTER_COMPUTE = ("reduce_scatter", "all_reduce", "reduce")


def latency_seconds(calls: float, latency: Figure, end: str = "low") -> float:
    """``calls`` x the per-call ``latency``: at its value (``end`` "low"), or at its interval's high end where
    it has one ("high")."""
    per_call = latency.high if end == "high" and latency.high is not None else latency.value
    return calls * per_call


def measured_beyond(machine: MachineDescription, kind: str, nodes: int, world: int) -> BeyondLine | None:
    """The probe's rate for ``kind`` beyond its line's sizes (zerogate.predict.collectives.beyond_line), on
    one node; None where the machine's collectives hold no size beyond the line (a description's figures)."""
    collectives = machine.collectives
    given = None if collectives is None else collectives.kinds.get(kind)
    if nodes > 1 or collectives is None or given is None or not given.samples:
        return None
    return beyond_line(list(given.samples), kind, collectives.world or world)


def floor_transfer(calls: float, volume: float, bandwidth: Figure, beyond: BeyondLine | None) -> float:
    """A floor's seconds for ``volume`` on the wire: at the bandwidth figure, and past the line's last size a
    call at the probe's rate beyond it where that is faster (a larger call measured under the line's
    extrapolation), so the floor stays under every measured call."""
    rate = bandwidth.value * 1e9
    if beyond is None or beyond.bandwidth <= rate:
        return volume / rate
    near, far = beyond.split(calls, volume)
    return near / rate + far / beyond.bandwidth


def collective_time(terms: list[Term], per: str, world: int, machine: MachineDescription) -> CollectiveTime:
    """Seconds the ``per`` (micro_step | boundary) collectives of ``terms`` take at least on ``machine``:
    per kind totals' calls x latency + volume / bandwidth, each part with its figure; ``missing``
    lists the parts without a figure (left out of ``seconds``, which is None when nothing is known).
    ``dependent(s)``: the kinds of a single call per micro-step that compute must wait for (BEFORE_COMPUTE)
    or that wait for compute (AFTER_COMPUTE), their known seconds summed (0 when there are none)."""
    kinds: dict[str, CollectivePart] = {}
    missing: list[str] = []
    known: list[float] = []
    dependent: dict[str, float] = {}
    for kind in dict.fromkeys(t.kind for t in terms if t.per == per):
        calls, volume = totals([t for t in terms if t.kind == kind], per, world)
        if not calls and not volume:
            continue
        figures = collective_figures(machine, kind)
        latency, bandwidth = figures.latency_s, figures.bandwidth_gbps
        parts = {
            "latency": None if latency is None else latency_seconds(calls, latency),
            "bandwidth": 0.0
            if not volume
            else None
            if bandwidth is None
            else floor_transfer(
                calls, volume, bandwidth, measured_beyond(machine, kind, machine.nodes, world)
            ),
        }
        for figure_name, seconds in parts.items():
            if seconds is None:
                missing.append(f"collectives per {per}: {kind} {figure_name} (no figure)")
            else:
                known.append(seconds)
        kinds[kind] = CollectivePart(
            calls=calls,
            volume_bytes=volume,
            latency=latency,
            bandwidth=bandwidth,
            latency_time_s=parts["latency"],
            transfer_time_s=parts["bandwidth"],
        )
        if per == MICRO_STEP and calls == 1 and kind in BEFORE_COMPUTE + AFTER_COMPUTE:
            dependent[kind] = sum(seconds for seconds in parts.values() if seconds is not None)
    return CollectiveTime(
        kinds=kinds,
        seconds=sum(known) if known or not kinds else None,
        missing=missing,
        dependent_kinds=list(dependent),
        dependent_s=sum(dependent.values()),
    )


def counted_product_parameters(counts: ModelCounts) -> int:
    """The parameters ``counts``' forward multiplies by (zerogate.hardware.product_parameters)."""
    return hardware.product_parameters(counts.total, counts.vocab, counts.hidden, counts.tied_embeddings)


def _flop_per_micro_step(counts: ModelCounts, setup: Setup) -> float:
    """FLOP of one rank's micro-step (zerogate.hardware's count per token x its tokens)."""
    per_token = hardware.training_flops_per_token(
        counted_product_parameters(counts),
        counts.layers,
        counts.hidden,
        setup.seq_len,
        recompute=setup.activation_checkpointing,
        attention_share=setup.attention_share[0],  # the least its kernel may compute: a floor stays below
    )
    tokens = setup.micro_batch * setup.seq_len
    return per_token * tokens


def _compute_terms(
    rank: int,
    setup: Setup,
    machine: MachineDescription,
    flop: float,
    moved: dict[str, float],
    model_compute: ModelComputeMeasurement | None,
) -> tuple[str, dict[str, float | None], str | None]:
    """(the rank's device, its compute and host-link terms in seconds, None where a figure is missing, where
    the device's peak comes from or why it is missing; None on the CPU)."""
    gpus = machine.gpus
    terms: dict[str, float | None] = {}
    if gpus:
        gpu = gpus[rank % len(gpus)]
        device = gpu.name
        peak = gpu_peak(machine, gpu, setup.dtype)  # the description's stated figure, else the catalogue's
        terms["compute(s)"] = flop / (peak.tflops * 1e12) if peak.tflops else None
        link = pcie_gbps(gpu.pcie)
        terms["pcie_h2d(s)"] = moved["h2d"] / (link * 1e9) if link else (None if moved["h2d"] else 0.0)
        terms["pcie_d2h(s)"] = moved["d2h"] / (link * 1e9) if link else (None if moved["d2h"] else 0.0)
        return device, terms, peak.source
    peak = machine.host.cpu_peak_tflops_fp32
    # The ranks share the host's cores: each gets its share of the measured peak.
    terms["compute(s)"] = flop / (peak * 1e12 / setup.ranks) if peak else None
    if model_compute is not None:
        # Every micro-step runs the model's forward and backward: at least that pass alone.
        terms[EAGER_PASS] = model_compute.forward_backward_s
    return "cpu", terms, None


def _rank_floors(
    setup: Setup,
    machine: MachineDescription,
    flop: float,
    moved: dict[str, float],
    micro_comms: CollectiveTime,
    model_compute: ModelComputeMeasurement | None,
) -> tuple[list[FloorRank], list[str]]:
    """Each rank's micro-step terms and floor (the largest known term), and the terms without a figure."""
    ranks: list[FloorRank] = []
    missing: list[str] = []
    for rank in range(setup.ranks):
        device, terms, peak_source = _compute_terms(rank, setup, machine, flop, moved, model_compute)
        # Every rank takes part in every collective, so each waits at least this long for them.
        terms["collectives(s)"] = micro_comms.seconds
        computed = [v for k in ("compute(s)", EAGER_PASS) if (v := terms.get(k)) is not None]
        if micro_comms.dependent_s and computed:
            # One gather of every parameter before the compute, one reduction of every gradient after it.
            terms["compute + dependent collectives(s)"] = max(computed) + micro_comms.dependent_s
        missing += [
            f"rank {rank} ({device}): {k}"
            + (f" ({peak_source})" if k == "compute(s)" and peak_source else "")
            for k, v in terms.items()
            if v is None
        ]
        known = [v for v in terms.values() if v is not None]
        ranks.append(
            FloorRank(
                rank=rank,
                device=device,
                terms=terms,
                micro_step_floor_s=max(known) if known else None,
                peak_source=peak_source,
            )
        )
    return ranks, missing


def _optimizer_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription
) -> dict[str, float | None]:
    """The optimizer update's seconds, bound by memory traffic: CPU Adam on the host (offloaded, or no
    GPUs), else each device's Adam on its share, the slowest device deciding."""
    gpus = machine.gpus
    per_param = adam_bytes_per_param(setup.dtype_bytes)
    if setup.offload_optimizer or not gpus:
        bandwidth = machine.host.memory_bandwidth_gbps
        return {"cpu_adam(s)": per_param * counts.total / (bandwidth * 1e9) if bandwidth else None}
    bandwidths = [gpu_bandwidth(machine, g).value for g in gpus]  # stated, else the card catalogue's
    known = [b for b in bandwidths if b]
    slowest = min(known) if len(known) == len(bandwidths) else None
    share = counts.partition_numel(setup.ranks) if setup.stage >= 1 else counts.total
    return {"device_adam(s)": per_param * share / (slowest * 1e9) if slowest else None}


def _communication(
    terms: list[Term],
    setup: Setup,
    machine: MachineDescription,
    micro_comms: CollectiveTime,
    boundary_comms: CollectiveTime,
) -> FloorCommunication:
    """The floor's ``communication``: the theory's terms for the run and their times on ``machine``."""
    return FloorCommunication(
        scheme=theory_scheme(setup),
        world=setup.ranks,
        route=None if machine.collectives is None else machine.collectives.route,
        backend=None if machine.collectives is None else machine.collectives.backend,
        terms=[
            TheoryTermRow(
                name=t.name,
                kind=t.kind,
                per=t.per,
                calls=t.calls,
                tensor_bytes=t.tensor_bytes,
                volume_bytes=t.volume(setup.ranks),
            )
            for t in terms
        ],
        micro_step=micro_comms,
        boundary=boundary_comms,
    )


def floor(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    model_compute: ModelComputeMeasurement | None = None,
) -> Floor:
    """Micro-step and optimizer-step floors (seconds) for ``setup`` on ``machine``, with every term.
    ``model_compute``: the model's own forward + backward timed on this machine (zerogate.predict.compute;
    CPU accelerator only), which bounds a rank's compute from below where operator overheads, not
    arithmetic, decide it; None where it was not measured (a described machine, GPUs)."""
    terms_theory = theory_terms(counts, setup)
    micro_comms = collective_time(terms_theory, MICRO_STEP, setup.ranks, machine)
    boundary_comms = collective_time(terms_theory, BOUNDARY, setup.ranks, machine)
    flop = _flop_per_micro_step(counts, setup)
    moved = link_bytes(counts, setup, nvlink=bool(machine.nvlink))
    ranks, missing = _rank_floors(setup, machine, flop, moved, micro_comms, model_compute)

    micro = [r.micro_step_floor_s for r in ranks if r.micro_step_floor_s is not None]
    micro_floor = max(micro) if micro else None
    optimizer_terms = _optimizer_terms(counts, setup, machine)
    missing += [f"optimizer: {k}" for k, v in optimizer_terms.items() if v is None]
    known_opt = [v for v in optimizer_terms.values() if v is not None]
    boundary_terms = {"collectives(s)": boundary_comms.seconds}
    missing += [f"boundary: {k}" for k, v in boundary_terms.items() if v is None]
    missing += micro_comms.missing + boundary_comms.missing
    known_boundary = [v for v in boundary_terms.values() if v is not None]
    step = (
        None
        if micro_floor is None
        else setup.accumulation * micro_floor + sum(known_boundary) + sum(known_opt)
    )
    return Floor(
        flop_per_micro_step_per_rank=flop,
        link_bytes_per_micro_step_per_rank=LinkBytes(**moved),
        ranks=ranks,
        micro_step_floor_s=micro_floor,
        optimizer_terms=optimizer_terms,
        boundary_terms=boundary_terms,
        accumulation=setup.accumulation,
        communication=_communication(terms_theory, setup, machine, micro_comms, boundary_comms),
        optimizer_step_floor_s=step,
        model_compute=model_compute,
        missing=missing,  # terms left out for lack of a figure: the floor is then lower than it could be
    )
