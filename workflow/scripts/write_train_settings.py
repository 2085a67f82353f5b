"""Entry point of the write_train_settings rule (logic: zerogate.config.settings)."""
from zerogate.entry import logging_to
from zerogate.io import write_json
from zerogate.config.settings import training_settings

with logging_to(snakemake.log[0]) as log:
    settings = training_settings({"stabiliser": snakemake.params.stabiliser, "checkpoint": snakemake.params.checkpoint})
    write_json(snakemake.output.settings, settings)
    log.info("training settings: %s", settings)
