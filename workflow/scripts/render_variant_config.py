"""Entry point of the render_variant_config rule (logic: zerogate.render.variants)."""

from zerogate.contracts.run import DsConfig
from zerogate.entry import logging_to
from zerogate.io import write_json
from zerogate.render.variants import variant_config

with logging_to(snakemake.log[0]) as log:
    config, overrides = variant_config(
        DsConfig.read(snakemake.input.ds_config).raw, snakemake.wildcards.variant
    )
    write_json(snakemake.output.ds_config, config)
    write_json(snakemake.output.overrides, overrides)
    for override in overrides:
        log.info("%s: %s -> %s", override["path"], override["before"], override["value"])
