"""The step-time ledger's term for the operators a micro-step runs beyond its products: on a synchronised
device (DeepSpeed's CPU accelerator) the host runs them one after another between the products; on a GPU
their kernels move their bytes through the device's memory.

Work: the planner's trace of the run's model (zerogate.predict.operator_tally: every ATen op of one
micro-step's forward with loss and its backward under torch's fake tensors, products left out) gives the
computing ops, their bytes (each op's tensor inputs and outputs) and the view ops. Rates: the
micro-benchmarks' operator chains (zerogate.predict.microbench_rates.OperatorLines): a dispatched op's cost
with autograd's share, and the cost per byte moved at the run's activation size and at its logits' size
(each op's bytes at the size timed nearest its largest tensor, OperatorLines.traffic_s: a byte of the
logits, beyond the caches, costs several times one of an activation).

Per micro-step, x G:
- low: the computing ops at the dispatch cost's low end, their bytes at the per-byte costs' low ends, the
  views free;
- high: the computing and the view ops at the dispatch cost's high end (a view dispatches as an op does, and
  is timed no cheaper here: its cost is somewhere between nothing and an op's), the bytes at the per-byte
  costs' high ends.

On a device that runs asynchronously (CUDA) the host's dispatch overlaps the kernels, so the term is the
kernels' memory traffic alone: the same ops' bytes over the slowest device's memory bandwidth at
DEVICE_MEMORY's fraction (zerogate.predict.step_time_memory.memory_bound), per micro-step x G, on the
compute stream beside the products (kind COMPUTE: the overlap rule hides the collectives behind both). Each
op's kernel is taken as one read of its inputs and one write of its outputs (a fused kernel moves less, a
kernel that rereads its input more: assumed). Without a trace of the model the term has no figure, and the
interval is then too low.
"""

from __future__ import annotations

from zerogate.config.machines import MachineDescription
from zerogate.predict.comms_terms import MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates, OperatorLines
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_memory import memory_bound
from zerogate.predict.step_time_terms import COMPUTE, SERIAL, Term, host_runs_between_products

OPERATORS = "functional operators"
WORK_SOURCE = (
    "the planner's trace of the run's model (zerogate.predict.operator_tally: every ATen op of the forward "
    "with loss and the backward under torch/_subclasses/fake_tensor.py, the products left out)"
)


def operator_terms(
    operators: OperatorTally | None,
    setup: Setup,
    machine: MachineDescription,
    measured: MeasuredRates | None,
) -> list[Term]:
    """The functional operators' term (module doc): the host's dispatch and traffic on a synchronised
    device, the kernels' memory traffic on a GPU. Without a trace of the model or (on the host) without the
    micro-benchmarks' chains it has no figure, and says which is missing."""
    if not host_runs_between_products(setup, machine):
        return [_device_traffic(operators, setup, machine)]
    lines = None if measured is None else measured.operator_lines
    if operators is None or lines is None:
        why = (
            "no trace of the model's operators (activations from the formula)"
            if operators is None
            else "no micro-benchmark of the host's cost per operator (plan/microbench.json operator_chains)"
        )
        return [
            Term(
                OPERATORS,
                SERIAL,
                MICRO_STEP,
                None,
                False,
                f"the dispatch and memory traffic of the ops between the products, run by the host: {why}",
            )
        ]
    g = setup.accumulation
    traffic_low, traffic_high = lines.traffic_s(operators.traffic_by_numel)
    low = operators.computing * lines.dispatch_s[0] + traffic_low
    high = (operators.computing + operators.views) * lines.dispatch_s[1] + traffic_high
    return [
        Term(
            OPERATORS,
            SERIAL,
            MICRO_STEP,
            (low * g, high * g),
            False,
            f"{operators.computing:.0f} computing ops moving {operators.traffic_bytes:.4g} B and "
            f"{operators.views:.0f} views per micro-step ({WORK_SOURCE}); each op "
            f"{lines.dispatch_s[0] * 1e6:.3g} to {lines.dispatch_s[1] * 1e6:.3g} us (the views 0 to that) "
            f"and the bytes {traffic_low:.3g} to {traffic_high:.3g} s ({_per_byte_text(lines)}); measured: "
            f"{lines.source}",
        )
    ]


def _device_traffic(operators: OperatorTally | None, setup: Setup, machine: MachineDescription) -> Term:
    """On a GPU: the computing ops' bytes, x G, over the device's memory (module doc)."""
    if operators is None:
        return Term(
            OPERATORS,
            COMPUTE,
            MICRO_STEP,
            None,
            False,
            "the memory traffic of the kernels between the products: no trace of the model's operators "
            "(activations from the formula)",
        )
    moved = operators.traffic_bytes * setup.accumulation
    seconds, rate = memory_bound(moved, setup, machine, on_host=False)
    return Term(
        OPERATORS,
        COMPUTE,
        MICRO_STEP,
        seconds,
        False,
        f"{operators.computing:.0f} computing ops moving {operators.traffic_bytes:.4g} B per micro-step, "
        f"each kernel reading its inputs and writing its outputs once ({WORK_SOURCE}); {rate}",
    )


def _per_byte_text(lines: OperatorLines) -> str:
    return ", ".join(
        f"{low * 1e9:.3g} to {high * 1e9:.3g} ns a byte at {numel} elements"
        for numel, (low, high) in sorted(lines.per_byte_s.items())
    )
