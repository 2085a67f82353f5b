"""The step-time ledger's term for the host's per-module and per-parameter work of a micro-step on a
synchronised device (DeepSpeed's CPU accelerator), where the host runs the engine's hooks and each module's
dispatch one after another between the products: "operator dispatch and engine hooks".

Work: the model's counts (zerogate.model.counts on the meta device: its modules, those inside the decoder
layers, each parameter's size), and which of them the run's ZeRO settings put through the engine's hooks
(:func:`hooked_modules`) and its per-parameter work (:func:`engine_parameters`). Rates: the micro-benchmarks'
synthetic stacks (zerogate.predict.microbench_rates.ModuleLines) timed at the run's ZeRO stage: the engine's
fixed cost per micro-step, its cost per module of one parameter, its cost per parameter more, and the eager
cost per module.

Per micro-step, x G; each end from the stacks' fastest and slowest repeats. On a device that runs
asynchronously (CUDA) the host's work runs beside the kernels: the same work measured on the GPU (the
micro-benchmarks time the stacks on the run's device) is a term of its own, ``HOST_WORK``, which the overlap
rule puts beside the device's whole micro-step (zerogate.predict.step_time: at least the longer of the two,
at most both one after the other; how far ZeRO-3's fetches wait for the device is not modelled). Without that
measurement (a described box) at ZeRO-3, where the parameter coordinator's fetch and release run per module on
the host (partitioned_param_coordinator.py ``fetch_sub_module``, ``release_sub_module``) and a small step is
the host's, the term takes the one ZeRO-3 step on a GPU this project measured, per hooked module
(:data:`DESCRIBED_GPU_HOST`); below ZeRO-3 the GPU's achievable fractions stand for it, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates, ModuleLines
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_terms import HOST_WORK, SERIAL, Term, host_runs_between_products

DISPATCH = "operator dispatch and engine hooks"
GPU_HOST = "engine hooks on the host, beside the kernels"


@dataclass(frozen=True)
class MeasuredHostStep:
    """A ZeRO-3 step on a GPU whose kernels took a negligible part of it: the host's work over the modules
    DeepSpeed hooked, and how far another host and DeepSpeed release may lie from it (``spread``: the
    factors on its rate per module, low and high)."""

    seconds: float
    hooked_modules: int
    spread: tuple[float, float]
    source: str

    def per_module(self) -> tuple[float, float]:
        """(low, high) seconds of the host's work a hooked module and micro-step."""
        rate = self.seconds / self.hooked_modules
        return rate * self.spread[0], rate * self.spread[1]


# docs/measurements.md, "The GPU check on a lent H200" (2026-12-04; tests/gpu/gpu_check.py): ZeRO-3 without
# offload, one rank, Qwen2.5-0.5B's shape (config/profiles/gpu-1x.yaml; no leaf modules on CUDA, so all 319
# of its modules are hooked: zerogate.model.counts), micro-batch 1 x 128 tokens, fp16, DeepSpeed 0.19.8,
# torch 2.11.0: step 3 (no update: the loss scale skipped it) took 0.417 s against under a millisecond of
# the ledger's device terms. The spread is assumed: the rows' hosts (CPU generation, clock, bare metal or a
# virtual machine), DeepSpeed releases and rank counts (each fetch launching an all-gather) differ from that
# one run, by a factor nobody measured; taken as up to 2x either way.
DESCRIBED_GPU_HOST = MeasuredHostStep(
    seconds=0.417,
    hooked_modules=319,
    spread=(0.5, 2.0),
    source=(
        "this project's ZeRO-3 step on a lent H200 (docs/measurements.md, 'The GPU check on a lent H200': "
        "0.417 s over 319 hooked modules, one rank, DeepSpeed 0.19.8), from half to twice that a module "
        "(assumed: other hosts, releases and rank counts, not measured)"
    ),
)


def hooked_modules(counts: ModelCounts, setup: Setup) -> int:
    """The modules whose micro-step goes through the engine's per-module work: at ZeRO-3 every module
    DeepSpeed registers its hooks on (parameter_offload.py ``_register_deepspeed_module``: the root and each
    child, recursively, except inside a leaf module, whose children it does not visit; the decoder layer is
    one when zero_optimization.leaf_module names it: ``setup.leaf_blocks``); below stage 3 every module (the
    engine's gradient hooks per parameter, stage_1_and_2.py ``create_reduce_and_remove_grad_hooks``)."""
    if setup.stage == 3 and setup.leaf_blocks:
        return counts.modules - counts.modules_in_blocks
    return counts.modules


def engine_parameters(counts: ModelCounts, setup: Setup) -> tuple[int, int]:
    """The parameters the engine's per-parameter work runs over in a micro-step, (fast end, slow end). The
    stacks' parameters are all fetched and released (persistence threshold 0,
    zerogate.predict.microbench.stack_config); at ZeRO-3 the run's parameters at or below
    stage3_param_persistence_threshold stay whole on every rank and skip the fetch and release
    (partitioned_param_coordinator.py ``fetch_sub_module``) but not the gradient hook (stage3.py
    ``reduce_ready_partitions_and_remove_grads``): the fast end counts the fetched parameters alone, the
    slow end every parameter. A leaf module's parameters are fetched with it, so they count whether or not
    their modules are hooked. Below stage 3 every parameter (the gradient hooks)."""
    total = len(counts.numels)
    if setup.stage == 3:
        return counts.fetched_parameters(setup.persistence_threshold), total
    return total, total


def _missing(counts: ModelCounts) -> Term:
    why = (
        "no module count for the model (counts written before they were recorded)"
        if not counts.modules
        else "no micro-benchmark of the engine's per-module cost at this ZeRO stage"
    )
    return Term(
        DISPATCH,
        SERIAL,
        MICRO_STEP,
        None,
        False,
        "eager dispatch per operator and the engine's fetch / release / gradient hooks per module and "
        f"parameter, run by the host between the products: {why}",
    )


def module_terms(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, measured: MeasuredRates | None
) -> list[Term]:
    """The host's per-module and per-parameter work of a micro-step, x G, where the host runs it (the CPU
    accelerator; none elsewhere): the engine's fixed cost, its cost per hooked module (ZeRO-3's pre/post
    forward and backward hooks, each module's dispatch) and per parameter (the parameter coordinator's
    fetch and release, the gradient hooks), and the eager dispatch of the modules inside a leaf module. The
    functional operators a module runs beyond its one product (attention's scores and softmax, rotary
    embedding, residual adds, the loss) are a term of their own (zerogate.predict.step_time_operators)."""
    lines = None if measured is None else measured.module_lines
    if lines is not None and lines.stage != setup.stage:
        lines = None
    if not host_runs_between_products(setup, machine):
        return _beside_the_kernels(counts, setup, lines)
    if lines is None or not counts.modules:
        return [_missing(counts)]
    seconds, work = _measured_work(counts, setup, lines)
    return [Term(DISPATCH, SERIAL, MICRO_STEP, seconds, False, f"{work}; measured: {lines.source}")]


def _measured_work(counts: ModelCounts, setup: Setup, lines: ModuleLines) -> tuple[tuple[float, float], str]:
    """The per-module and per-parameter work of a micro-step at the stacks' lines, x G, and what it counts."""
    hooked, parameters = hooked_modules(counts, setup), engine_parameters(counts, setup)
    low, high = lines.seconds(hooked, counts.modules, parameters)
    per_low, per_high = lines.per_module()
    per_parameter = lines.per_parameter()
    parameter_cost = (
        f"{per_parameter[0] * 1e3:.3g} to {per_parameter[1] * 1e3:.3g} ms per parameter more than one a "
        "module"
        if per_parameter is not None
        else "the cost per parameter more than one a module not timed (micro-benchmarks without the stack of "
        "two parameters a module): none counted"
    )
    fetched = (
        f"{parameters[0]} fetched to {parameters[1]} in all"
        if parameters[0] != parameters[1]
        else f"all {parameters[1]}"
    )
    return (low * setup.accumulation, high * setup.accumulation), (
        f"{hooked} of the model's {counts.modules} modules through the ZeRO-{setup.stage} engine's "
        f"per-module work ({per_low * 1e3:.3g} to {per_high * 1e3:.3g} ms each of one parameter per "
        f"micro-step, plus its fixed cost), its parameters through the engine's per-parameter work "
        f"({fetched}; {parameter_cost}), the other {counts.modules - hooked} modules eagerly (hooks: "
        "parameter_offload.py _register_deepspeed_module, partitioned_param_coordinator.py "
        "fetch_sub_module / release_sub_module, stage3.py reduce_ready_partitions_and_remove_grads; "
        "counts: zerogate.model.counts)"
    )


def _beside_the_kernels(counts: ModelCounts, setup: Setup, lines: ModuleLines | None) -> list[Term]:
    """On a GPU: the host's per-module and per-parameter work of a micro-step, x G, as the stacks timed it on
    the device (``HOST_WORK``, beside the kernels); at ZeRO-3 without that measurement, the measured H200
    step a hooked module (:func:`_described`), missing only without a module count; none below ZeRO-3
    without it (module doc)."""
    if lines is None or not counts.modules:
        if setup.stage != 3:
            return []
        what = (
            "ZeRO-3's per-module hooks, fetch and release and the launches the host runs for the kernels "
            "(parameter_offload.py _register_deepspeed_module, partitioned_param_coordinator.py)"
        )
        if not counts.modules:
            return [
                Term(GPU_HOST, HOST_WORK, MICRO_STEP, None, True, f"{what}: no module count for the model")
            ]
        return [_described(counts, setup, what)]
    seconds, work = _measured_work(counts, setup, lines)
    return [
        Term(
            GPU_HOST,
            HOST_WORK,
            MICRO_STEP,
            seconds,
            True,
            f"{work}, as the synthetic stacks took them on the device (the host's work and the launches: the "
            "stacks' kernels are microseconds); beside the kernels: zerogate.predict.step_time; measured: "
            f"{lines.source}",
        )
    ]


def recomputed_modules(counts: ModelCounts, setup: Setup) -> int:
    """The hooked modules whose forward runs again in the backward: with activation checkpointing, those
    inside the decoder layers (torch's non-reentrant checkpoint re-runs each layer's modules, their ZeRO-3
    hooks included: zerogate.model.build.enable_activation_checkpointing); 0 where a decoder layer is a leaf
    module (its children are not hooked) or without checkpointing."""
    if not setup.activation_checkpointing or (setup.stage == 3 and setup.leaf_blocks):
        return 0
    return counts.modules_in_blocks


def _described(counts: ModelCounts, setup: Setup, what: str) -> Term:
    """ZeRO-3's host work on a GPU box not measured: its hooked modules at :data:`DESCRIBED_GPU_HOST`'s rate
    a module, x G, beside the kernels. The measured step had no activation checkpointing; the modules a
    checkpointed layer runs again add their forward's share of that rate, which nobody measured: from none
    to half (DeepSpeed's backward repeats the forward's fetch and release for each module and adds its
    gradient hooks, so the forward is at most half of a module's work)."""
    hooked, again = hooked_modules(counts, setup), recomputed_modules(counts, setup)
    low, high = DESCRIBED_GPU_HOST.per_module()
    g = setup.accumulation
    recomputed = (
        f"; {again} modules run their forward again (activation checkpointing), each at none to half the rate"
        if again
        else ""
    )
    return Term(
        GPU_HOST,
        HOST_WORK,
        MICRO_STEP,
        (hooked * low * g, (hooked + again / 2) * high * g),
        True,
        f"{what}: {hooked} of the model's {counts.modules} modules hooked, {low * 1e3:.3g} to "
        f"{high * 1e3:.3g} ms each a micro-step{recomputed} ({DESCRIBED_GPU_HOST.source}); beside the "
        "kernels: zerogate.predict.step_time",
    )
