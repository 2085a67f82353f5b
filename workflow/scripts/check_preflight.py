"""Entry point of the check_preflight rule (logic: zerogate.predict.preflight): the verdict, ok or not.
approve_plan refuses the run on it, together with the planner's verdict."""

from zerogate.contracts.machine import Fingerprint
from zerogate.entry import logging_to
from zerogate.predict.preflight import verdict

with logging_to(snakemake.log[0]) as log:
    result = verdict(snakemake.params.needs, Fingerprint.read(snakemake.input.fingerprint))
    log.info("pre-flight: %s", result)
    result.write(snakemake.output.preflight)
