"""Entry point of the check_gates rule (logic: zerogate.analysis.gates)."""
import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.analysis.gates import evaluate
from zerogate.analysis.measures import SpikeRule

with logging_to(snakemake.log[0]) as log:
    verdicts = evaluate(
        snakemake.params.gates,
        pd.read_parquet(snakemake.input.steps),
        pd.read_parquet(snakemake.input.events),
        read_json(snakemake.input.summary),
        read_json(snakemake.input.run_spec),
        read_json(snakemake.input.deviations),
        read_json(snakemake.input.fingerprint),
        snakemake.params.warmup_steps,
        SpikeRule.from_settings(snakemake.params.stabiliser),
        plan=read_json(snakemake.input.plan),
        run_meta=read_json(snakemake.input.run_meta),
        ds_config=read_json(snakemake.input.ds_config),
    )
    write_json(snakemake.output.verdicts, verdicts)
    for gate in verdicts["gates"]:
        log.info("%s: %s (measured %s %s)", gate["name"], gate["verdict"], gate["measured"], gate["unit"])
