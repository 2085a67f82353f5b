"""Entry point of the probe_hardware rule (logic: zerogate.plan.probe)."""
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.io import write_json
from zerogate.plan.probe import probe, summary

with logging_to(snakemake.log[0]) as log:
    fingerprint = probe()
    text = summary(fingerprint)
    Path(snakemake.output.summary).write_text(text + "\n")
    write_json(snakemake.output.fingerprint, fingerprint)
    log.info("%s", text)
