"""The planner's files: the plan (``plan/plan.json``; ``plan/plan_measured.json`` with the measured compute
term; ``claims/claimed_box_plan.json`` for the claimed box), its approval (``plan/approved.json``), the
measured compute term (``plan/model_compute.json``), the runtime baseline (``plan/runtime_baseline.json``)
and the peak prediction (``plan/peak_memory.json``). Every size is in bytes, every time in seconds."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zerogate.contracts.base import Artefact, Record
from zerogate.contracts.machine import Figure, Preflight
from zerogate.contracts.run import Deviation, Dtype

# The three fit verdicts of a check (zerogate.predict.fit.verdict): the need's interval below the capacity,
# the capacity inside it, the interval above it.
FITS, MAY_NOT_FIT, DOES_NOT_FIT = "fits", "may not fit", "does not fit"
VERDICTS = (FITS, MAY_NOT_FIT, DOES_NOT_FIT)


class MemoryCheck(Record):
    """One rank's device (GPUs) or the node's host RAM: what the run needs there and what it has. ``need`` is
    the point figure (``fits``: it is within the capacity); ``need_low``..``need_high`` the interval its
    terms' own uncertainty gives (zerogate.predict.cuda_terms.Spread), and ``verdict`` the three-valued fit
    on that interval."""

    what: str  # "device memory" | "host RAM"
    rank: int | None  # None: the host check
    device: str
    need_bytes: int = Field(alias="need(bytes)")
    capacity_bytes: int = Field(alias="capacity(bytes)")
    headroom_bytes: int = Field(alias="headroom(bytes)")
    fits: bool
    need_low_bytes: int | None = Field(None, alias="need_low(bytes)")  # None: a file written before intervals
    need_high_bytes: int | None = Field(None, alias="need_high(bytes)")
    verdict: str | None = None  # one of VERDICTS


class SuggestedSettings(Record):
    """A change the planner found that would fit, as settings (zerogate.render.overlay writes a profile)."""

    nodes: int
    ranks: int
    micro_batch: int
    accumulation: int
    offload_optimizer: bool
    offload_param: bool
    activation_checkpointing: bool
    seq_len: int | None = None  # None: the planned run's
    nvme_optimizer: bool = False  # the optimizer offload goes to NVMe, not host RAM
    nvme_param: bool = False
    host_ram_bytes: int | None = Field(None, alias="host_ram(bytes)")  # a host with this much RAM instead
    # Page-locked host buffers for the offloads (zero_optimization.offload_*.pin_memory); None: the planned
    # run's.
    pin_memory: bool | None = None
    # Ranks bound to cores by DeepSpeed's launcher (--bind_cores_to_rank); None: the planned run's (unbound).
    bind_cores: bool | None = None


class Suggestion(Record):
    change: str
    tightest: str  # the check with the least headroom after the change
    need_bytes: int = Field(alias="need(bytes)")
    capacity_bytes: int = Field(alias="capacity(bytes)")
    settings: SuggestedSettings
    fits: bool = True  # every check fits after the change (Plan.device_changes lists some that do not)
    smallest_device_need_bytes: int | None = Field(
        None, alias="smallest_device_need(bytes)"
    )  # None without GPUs
    # The node's host RAM and NVMe need after the change (None: not computed for this kind of change).
    host_need_bytes: int | None = Field(None, alias="host_need(bytes)")
    nvme_need_bytes: int | None = Field(None, alias="nvme_need(bytes)")
    # The change as a profile that extends the planned one (zerogate.render.overlay.suggestion_profile), where
    # the plan rule wrote it, and the one command that plans it; None until a plan rule writes it.
    profile_file: str | None = None
    command: str | None = None
    # The optimizer step the change leaves, predicted on paper by the step-time ledger (zerogate.predict
    # .step_time, the machine's figures as the plan's own prediction takes them): its interval, and the terms
    # without a figure (the interval is then a lower bound). None: not predicted (no term had a figure).
    step_time_low_s: float | None = Field(None, alias="step_time_low(s)")
    step_time_high_s: float | None = Field(None, alias="step_time_high(s)")
    step_time_missing: list[str] = []


class FloorRank(Record):
    """One rank's micro-step floor: its terms (seconds, None where a figure is missing) and the largest."""

    rank: int
    device: str
    terms: dict[str, float | None]
    micro_step_floor_s: float | None = Field(alias="micro_step_floor(s)")
    # Where the device's peak comes from ("stated in <file> (...)", "catalogue: <card> (...)") or why it is
    # missing; None on the CPU.
    peak_source: str | None = None


class CollectivePart(Record):
    """One collective kind in a micro-step or at the boundary: calls x latency + volume / bandwidth."""

    calls: float
    volume_bytes: float = Field(alias="volume(bytes)")
    latency: Figure | None
    bandwidth: Figure | None
    latency_time_s: float | None = Field(alias="latency_time(s)")
    transfer_time_s: float | None = Field(alias="transfer_time(s)")


class CollectiveTime(Record):
    kinds: dict[str, CollectivePart]
    seconds: float | None
    missing: list[str]
    dependent_kinds: list[str]
    dependent_s: float = Field(alias="dependent(s)")


class TheoryTermRow(Record):
    name: str
    kind: str
    per: str
    calls: float
    tensor_bytes: float
    volume_bytes: float = Field(alias="volume(bytes)")


class FloorCommunication(Record):
    scheme: str
    world: int
    route: str | None
    backend: str | None
    terms: list[TheoryTermRow]
    micro_step: CollectiveTime
    boundary: CollectiveTime


class LinkBytes(Record):
    h2d: float
    d2h: float


class ModelComputeMeasurement(Record):
    """The model's own forward + backward through the run's DeepSpeed engine on one rank, timed here
    (zerogate.predict.compute): the floor's measured compute term on the CPU accelerator."""

    forward_backward_s: float = Field(alias="forward_backward(s)")  # the fastest timed pass
    samples_s: list[float] = Field(alias="samples(s)")
    threads: int
    micro_batch: int
    seq_len: int
    dtype: Dtype
    parameters: int
    through_deepspeed: bool
    how: str


class Floor(Record):
    """The shortest micro-step and optimizer step the machine could run (zerogate.predict.floor)."""

    flop_per_micro_step_per_rank: float
    link_bytes_per_micro_step_per_rank: LinkBytes
    ranks: list[FloorRank]
    micro_step_floor_s: float | None = Field(alias="micro_step_floor(s)")
    optimizer_terms: dict[str, float | None]
    boundary_terms: dict[str, float | None]
    accumulation: int
    communication: FloorCommunication
    optimizer_step_floor_s: float | None = Field(alias="optimizer_step_floor(s)")
    model_compute: ModelComputeMeasurement | None
    missing: list[str]  # terms left out for lack of a figure: the floor is then lower than it could be


class TimeTerm(Record):
    """One term of the step-time ledger (zerogate.predict.step_time): its seconds per optimizer step (a
    micro-step's term times the accumulation), bracketed by the uncertainty of its rate, and what it
    contributes to the step once the overlap rule is applied."""

    name: str
    kind: str  # compute | collective | host_copy | optimizer | serial | host_work (beside a GPU's kernels)
    per: str  # micro_step | boundary
    low_s: float | None = Field(alias="low(s)")  # None: no figure (listed in StepTime.missing)
    high_s: float | None = Field(alias="high(s)")
    overlapped: bool  # runs on a stream of its own beside the compute (DeepSpeed), or serially
    # Seconds of the interval's middle this term decides: the whole of a serial term, the longest of an
    # overlapped group, 0 for a term hidden behind a longer one, plus any part the overlap leaves exposed.
    contribution_s: float | None = Field(alias="contribution(s)")
    share: float | None  # contribution / the sum of contributions
    source: str


class StepTime(Record):
    """The predicted optimizer-step time on the planned machine: an interval (low, high) from the terms'
    rate brackets, the term that decides it, each term's seconds, share and overlap (zerogate.predict.
    step_time); the floor (Floor) stays the lower bound beside it."""

    low_s: float | None = Field(alias="low(s)")
    high_s: float | None = Field(alias="high(s)")
    deciding_term: str | None
    micro_step_low_s: float | None = Field(alias="micro_step_low(s)")
    micro_step_high_s: float | None = Field(alias="micro_step_high(s)")
    accumulation: int
    overlap: str  # the overlap rule applied, with its source
    terms: list[TimeTerm]
    missing: list[str]  # terms without a figure: left out of low and high, so the interval is then too low


class PaperRow(Record):
    device_per_rank_bytes: int | None = Field(alias="device_per_rank(bytes)")


class EstimatorRow(Record):
    """DeepSpeed's own estimator (called, never re-typed) for one scheme."""

    device_per_rank_bytes: int = Field(alias="device_per_rank(bytes)")
    host_per_node_bytes: int = Field(alias="host_per_node(bytes)")


class ZerogateRow(Record):
    """zerogate's terms for one scheme (zerogate.predict.zero_terms.zerogate_terms; each term's source in
    Ledger.term_sources). ``device_per_rank`` is the device level (what must fit the device's memory), the
    tensor and allocator peaks are the levels below it (zerogate.predict.phases.device_levels)."""

    device_terms_bytes: dict[str, int] = Field(alias="device_terms(bytes)")
    host_terms_per_rank_bytes: dict[str, int] = Field(alias="host_terms_per_rank(bytes)")
    nvme_terms_per_rank_bytes: dict[str, int] = Field(alias="nvme_terms_per_rank(bytes)")
    device_tensor_peak_per_rank_bytes: int = Field(alias="device_tensor_peak_per_rank(bytes)")
    device_allocator_peak_per_rank_bytes: int = Field(alias="device_allocator_peak_per_rank(bytes)")
    device_per_rank_bytes: int = Field(alias="device_per_rank(bytes)")
    device_per_rank_other_checkpointing_bytes: int = Field(alias="device_per_rank_other_checkpointing(bytes)")
    activations_formula_bytes: int = Field(alias="activations_formula(bytes)")  # the Korthikanti cross-check
    host_per_node_bytes: int = Field(alias="host_per_node(bytes)")
    nvme_per_node_bytes: int = Field(alias="nvme_per_node(bytes)")
    pinned_per_node_bytes: int = Field(alias="pinned_per_node(bytes)")
    # The device level's and the host's interval from the terms' own uncertainty (zerogate.predict.fit:
    # device_need, host_need), [low, high]; None in a file written before intervals.
    device_per_rank_range_bytes: list[int] | None = Field(None, alias="device_per_rank_range(bytes)")
    host_per_node_range_bytes: list[int] | None = Field(None, alias="host_per_node_range(bytes)")


class ActivationTerms(Record):
    """The run's activation terms and how they were found (traced, or the formula for hand-made counts)."""

    basis: str  # "traced" | "formula"
    how: str
    per_layer_bytes: int | None = Field(alias="per_layer(bytes)")
    outside_layers_bytes: int | None = Field(alias="outside_layers(bytes)")
    layers: int
    saved_bytes: int = Field(alias="saved(bytes)")
    backward_transient_bytes: int = Field(
        alias="backward_transient(bytes)"
    )  # to the first accumulated gradient
    at_first_gradient_bytes: int | None = Field(alias="at_first_gradient(bytes)")  # traced only
    after_first_gradient_bytes: int = Field(alias="after_first_gradient(bytes)")
    formula_bytes: int = Field(alias="formula(bytes)")  # Korthikanti et al. 2022, the cross-check
    # Traced only: per phase with activations, the peak of live bytes in each of glibc's size classes (heap:
    # storages of at most 32 MiB, mapped: larger), what the CPU resident set's retained_heap term needs.
    size_classes_bytes: dict[str, dict[str, int]] | None = Field(None, alias="size_classes(bytes)")


class SchemeLedger(Record):
    paper: PaperRow
    deepspeed: EstimatorRow | None
    zerogate: ZerogateRow


class Ledger(Record):
    """Every scheme, three ledgers: the ZeRO paper's, DeepSpeed's estimator, zerogate's terms."""

    parameters: int
    largest_layer_parameters: int
    ranks: int
    nodes: int
    dtype: Dtype
    activation_checkpointing: bool
    attention: str
    micro_batch: int
    seq_len: int
    scheme: str
    activations: ActivationTerms
    term_sources: dict[
        str, str
    ]  # where each term comes from: a DeepSpeed source file, a measurement, an assumption
    schemes: dict[str, SchemeLedger]

    @property
    def own(self) -> SchemeLedger:
        """The run's own scheme."""
        return self.schemes[self.scheme]


class PeerPlan(Record):
    """A peer of ZeRO-3 planned for the same machine, model, batch and precision (torch FSDP2 as
    zerogate.runtime.engines.Fsdp2Engine wraps the model, with or without CPUOffloadPolicy): what each rank's
    device and the host would need (zerogate.predict.fsdp2_terms: fsdp2_terms, fsdp2_host_need_per_rank)
    and what one rank would communicate per optimizer step (zerogate.predict.fsdp2_comms.fsdp2_theory)."""

    variant: str  # a zerogate.render.variants.PEERS name
    what: str
    fits: bool
    checks: list[MemoryCheck]
    device_terms_bytes: dict[str, int] = Field(alias="device_terms(bytes)")  # one rank's; empty without GPUs
    communicated_per_step_bytes: float = Field(alias="communicated_per_step(bytes)")  # volume, one rank
    note: str | None = None


class Plan(Artefact):
    """Does the run fit this (or the described) machine, per rank and per host, and how fast could it be."""

    CONTRACT = "plan"

    machine: str
    machine_source: str  # "probed" | "described"
    profile: str
    scheme: str
    ranks: int
    nodes: int
    dtype: Dtype
    fits: bool
    refused: bool  # does not fit and the profile does not override the planner
    deciding_check: MemoryCheck
    checks: list[MemoryCheck]
    # The largest micro-batch per rank with which every check fits, the rest of the run unchanged (0: none).
    largest_micro_batch_per_rank: int
    # The three-valued verdict over the checks (the worst check's), and the largest micro-batch per rank with
    # which every check's verdict is "fits" (its interval's high end within the capacity) and with which no
    # check's is "does not fit" (its low end within): "fits up to N, may fit up to M".
    verdict: str | None = None
    largest_micro_batch_fits_per_rank: int | None = None
    largest_micro_batch_may_fit_per_rank: int | None = None
    notes: list[str] = []  # what the checks could not judge (an NVMe capacity nobody states, say)
    suggestions: list[Suggestion]  # changes that would make the run fit (none when it fits)
    # Changes a profile expresses that lower the device need (checkpointing, shorter sequences, a smaller
    # micro-batch), each with the smallest device's need after it, fitting or not: what a claim on the small
    # card's memory is judged against (zerogate.analysis.on_paper.judge_memory). Empty without GPUs.
    device_changes: list[Suggestion] = []
    # When the host RAM check fails: what would make the host fit (optimizer offload only, offload to
    # NVMe, more RAM), each with the host, device and NVMe need after it
    # (zerogate.predict.suggestions.host_changes).
    host_changes: list[Suggestion] = []
    # When the run fits: changes to how it moves its data, not to what it trains, that keep it fitting
    # (page-locked host buffers on or off where it offloads to a GPU, each other ZeRO-3 offload choice), each
    # with the step it leaves (zerogate.predict.suggestions.time_changes).
    time_changes: list[Suggestion] = []
    pinned_memory: str | None
    floor: Floor
    ledger: Ledger
    deviations: list[Deviation]
    # ZeRO-3's peers on the same machine (FSDP2 without and with its offload), planned beside the run.
    peers: list[PeerPlan] = []
    # The predicted optimizer-step time (zerogate.predict.step_time), beside the floor; None in plans
    # written before it was predicted.
    step_time: StepTime | None = None

    @property
    def device_checks(self) -> list[MemoryCheck]:
        return [c for c in self.checks if c.rank is not None]

    @property
    def smallest_device(self) -> MemoryCheck | None:
        """The check of the rank on the device with the least memory (None without GPUs)."""
        devices = self.device_checks
        return min(devices, key=lambda c: c.capacity_bytes) if devices else None


class Approval(Artefact):
    """``plan/approved.json``: the plan fits (or the profile overrides it) and the pre-flight check passed."""

    CONTRACT = "approval"

    fits: bool
    deviations: list[Deviation]
    preflight: Preflight


class ModelCompute(Artefact):
    CONTRACT = "model_compute"

    accelerator: str
    measurement: ModelComputeMeasurement | None  # None on GPUs: the host dispatches while the device computes


class BaselineMeasurement(Record):
    """The resident set of a process with what a training rank loads, no model of the run's
    (zerogate.runtime.baseline): the CPU peak prediction's runtime term."""

    peak_rss_bytes: int = Field(alias="peak_rss(bytes)")
    peak_rss_range_bytes: list[int] = Field(alias="peak_rss_range(bytes)")
    runs: list[dict[str, Any]]  # each interpreter's /proc/self/status figures, per stage
    module: str
    backend: str
    how: str


class RuntimeBaseline(Artefact):
    CONTRACT = "runtime_baseline"

    accelerator: str
    baseline: BaselineMeasurement | None  # None on GPUs: the CUDA context is a term of its own


class PredictedPeak(Record):
    """One level of a rank's predicted peak (zerogate.predict.levels.peak_levels) and what measures it."""

    predicted_bytes: int = Field(alias="predicted(bytes)")
    terms_bytes: dict[str, int] = Field(alias="terms(bytes)")  # the terms it sums (by phase: peak_split)
    what: str


class PeakPrediction(Artefact):
    """Each rank's predicted peak memory, term by term (zerogate.predict.levels.peak_terms), and every level
    the accelerator measures (``levels``: tensor, allocator and device on GPUs; tensor and resident set on
    the CPU accelerator)."""

    CONTRACT = "peak_prediction"

    scheme: str
    ranks: int
    accelerator: str
    metric: str  # the step-record key the prediction is compared with
    what: str
    terms_bytes: dict[str, int] = Field(alias="terms(bytes)")
    persistent_bytes: int = Field(alias="persistent(bytes)")
    transient_bytes: int = Field(alias="transient(bytes)")
    total_bytes: int = Field(alias="total(bytes)")
    runtime_baseline: BaselineMeasurement | None
    levels: dict[str, PredictedPeak]
