"""Entry point of the write_variant_run_spec rule: the comparison runs' run spec (profile key ``variants``),
the
run's own with ``variant_optimizer_steps`` optimizer steps; everything else, the data and the seed included,
the
same."""

from zerogate.contracts.run import RunSpec
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    spec = RunSpec.read(snakemake.input.run_spec)
    steps = int(snakemake.params.optimizer_steps)
    training = spec.training.model_copy(update={"optimizer_steps": steps})
    RunSpec.model_validate({**spec.model_dump(by_alias=False), "training": training}).write(
        snakemake.output.run_spec
    )
    log.info("variants: %d optimizer steps each (the run: %d)", steps, spec.training.optimizer_steps)
