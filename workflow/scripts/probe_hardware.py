"""Entry point of the probe_hardware rule (logic: zerogate.runtime.probe; figures:
zerogate.predict.collectives)."""

from pathlib import Path

from zerogate.contracts.machine import Fingerprint
from zerogate.entry import logging_to
from zerogate.predict.collectives import interpret
from zerogate.runtime.probe import probe, summary

with logging_to(snakemake.log[0]) as log:
    found = probe()
    fingerprint = Fingerprint.of({**found, "collectives": interpret(found["collectives"])}, "the probe")
    text = summary(fingerprint)
    Path(snakemake.output.summary).write_text(text + "\n")
    fingerprint.write(snakemake.output.fingerprint)
    log.info("%s", text)
