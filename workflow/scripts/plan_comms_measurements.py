"""Entry point of the plan_comms_measurements rule (logic: zerogate.predict.comms_plan.measurements): every
scheme and accumulation the communication worker measures, with its DeepSpeed config
(zerogate.render.comms_runs) and the theory's settings."""

from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to
from zerogate.predict.comms_plan import measurements

with logging_to(snakemake.log[0]) as log:
    plan = measurements(DsConfig.read(snakemake.input.ds_config), RunSpec.read(snakemake.input.run_spec))
    plan.write(snakemake.output.measurements)
    for entry in plan.measurements:
        log.info(
            "%s at accumulation %d: ZeRO stage %s",
            entry.scheme,
            entry.accumulation,
            entry.ds_config.get("zero_optimization", {}).get("stage"),
        )
