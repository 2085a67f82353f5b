"""Entry point of the check_gates rule (logic: zerogate.analysis.gates)."""

from zerogate.analysis.evidence import load_evidence
from zerogate.analysis.gates import evaluate
from zerogate.config.judging import GateSettings
from zerogate.contracts.base import typed
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    gates = typed(tuple[GateSettings, ...], snakemake.params.gates)
    verdicts = evaluate(gates, load_evidence(dict(snakemake.input.items())))
    verdicts.write(snakemake.output.verdicts)
    for gate in verdicts.gates:
        shown = "" if gate.interval is None else f" [{gate.interval.low:.4g}, {gate.interval.high:.4g}]"
        log.info("%s: %s (measured %s%s %s)", gate.name, gate.verdict, gate.measured, shown, gate.unit)
