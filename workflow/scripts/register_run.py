"""Entry point of the register_run rule (logic: zerogate.report.registry)."""

from zerogate.analysis.evidence import load_evidence
from zerogate.entry import logging_to
from zerogate.report.registry import registry_record

with logging_to(snakemake.log[0]):
    inputs = snakemake.input
    files = {
        "report": inputs.report,
        "verdicts": inputs.verdicts,
        "steps": inputs.steps,
        "events": inputs.events,
        "provenance": inputs.provenance,
        "figures": {k: inputs[k] for k in ("loss", "step_time", "memory", "loss_scale")},
        "repeat_steps": list(inputs.repeat_steps),
    }
    registry = registry_record(snakemake.params.machine, load_evidence(dict(inputs.items())), files)
    registry.write(snakemake.output.registry)
