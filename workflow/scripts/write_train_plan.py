"""Entry point of the write_train_plan rule (logic: zerogate.plan)."""
from zerogate.entry import logging_to, write_json
from zerogate.plan import training_plan

with logging_to(snakemake.log[0]) as log:
    plan = training_plan({"stabiliser": snakemake.params.stabiliser, "checkpoint": snakemake.params.checkpoint})
    write_json(snakemake.output.plan, plan)
    log.info("training plan: %s", plan)
