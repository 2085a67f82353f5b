"""Entry point of the render_untuned_config rule (benchmarks): the rendered config without the CPU
communication tuning of zerogate.render.cpu_tuning (the step time before that tuning)."""

from zerogate.contracts.run import DsConfig
from zerogate.entry import logging_to
from zerogate.io import write_json
from zerogate.render.cpu_tuning import untuned_overrides
from zerogate.render.overrides import apply_overrides

with logging_to(snakemake.log[0]) as log:
    overrides = untuned_overrides(snakemake.params.hidden_size)
    write_json(
        snakemake.output.ds_config, apply_overrides(DsConfig.read(snakemake.input.ds_config).raw, overrides)
    )
    write_json(snakemake.output.overrides, overrides)
    for override in overrides:
        log.info("%s -> %s", override["path"], override["value"])
