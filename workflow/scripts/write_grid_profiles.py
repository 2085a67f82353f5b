"""Entry point of the write_grid_profiles rule (logic: zerogate.bench.grid_points): the whole grid checked,
then one profile per point; a bad point stops the rule with one line, nothing written."""
from zerogate.bench.grid_points import write_profiles
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError

try:
    with logging_to(snakemake.log[0]) as log:
        for path in write_profiles(repo_root(snakemake), snakemake.params.out_dir, snakemake.input.grid):
            log.info("wrote %s", path)
except InputError as error:
    fail(str(error))
