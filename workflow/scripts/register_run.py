"""Entry point of the register_run rule (logic: zerogate.report.registry)."""
import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.analysis.measures import SpikeRule
from zerogate.report.registry import registry_record

with logging_to(snakemake.log[0]):
    inputs = snakemake.input
    record = registry_record(
        machine=snakemake.params.machine,
        verdicts=read_json(inputs.verdicts),
        steps=pd.read_parquet(inputs.steps),
        run_meta=read_json(inputs.run_meta),
        provenance=read_json(inputs.provenance),
        deviations=read_json(inputs.deviations),
        files={
            "report": inputs.report, "verdicts": inputs.verdicts, "steps": inputs.steps, "events": inputs.events,
            "provenance": inputs.provenance,
            "figures": {k: inputs[k] for k in ("loss", "step_time", "memory", "loss_scale")},
        },
        warmup_steps=snakemake.params.warmup_steps,
        spike_rule=SpikeRule.from_settings(snakemake.params.stabiliser),
    )
    write_json(snakemake.output.registry, record)
