"""Entry point of the write_train_settings rule: the profile's stabiliser, checkpoint and evaluation settings,
every default filled in (zerogate.config.training), as the training loop and the judging rules read them."""

from zerogate.contracts.run import TrainSettings
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    params = snakemake.params
    settings = TrainSettings.of(
        {"stabiliser": params.stabiliser, "checkpoint": params.checkpoint, "evaluation": params.evaluation},
        "the profile's settings",
    )
    settings.write(snakemake.output.settings)
    log.info("training settings: %s", settings)
