"""The step-time ledger's term for the operators a micro-step runs beyond its products, on a synchronised
device (DeepSpeed's CPU accelerator), where the host runs them one after another between the products.

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

On a device that runs asynchronously (CUDA) the host's dispatch overlaps the kernels and the kernels' time
is not what a host chain measures: no term there (the GPU's achievable fractions stand for the whole pass).
"""

from __future__ import annotations

from zerogate.config.machines import MachineDescription
from zerogate.predict.comms_terms import MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates, OperatorLines
from zerogate.predict.operator_tally import OperatorTally
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_terms import SERIAL, Term, host_runs_between_products

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
    """The functional operators' term on a synchronised device (module doc); none on a GPU. Without a trace
    of the model or without the micro-benchmarks' chains it has no figure, and says which is missing."""
    if not host_runs_between_products(setup, machine):
        return []
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


def _per_byte_text(lines: OperatorLines) -> str:
    return ", ".join(
        f"{low * 1e9:.3g} to {high * 1e9:.3g} ns a byte at {numel} elements"
        for numel, (low, high) in sorted(lines.per_byte_s.items())
    )
