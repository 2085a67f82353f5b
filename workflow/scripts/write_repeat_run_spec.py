"""Entry point of the write_repeat_run_spec rule: the run spec of one repeat (profile key ``repeats``), the
run's own with the seed training.seed + the repeat's number; everything else, the data included, the same."""

from zerogate.contracts.run import RunSpec
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    spec = RunSpec.read(snakemake.input.run_spec)
    repeat = int(snakemake.wildcards.repeat)
    seed = spec.training.seed + repeat
    training = spec.training.model_copy(update={"seed": seed})
    RunSpec.model_validate({**spec.model_dump(by_alias=False), "training": training}).write(
        snakemake.output.run_spec
    )
    log.info("repeat %d: seed %d", repeat, seed)
