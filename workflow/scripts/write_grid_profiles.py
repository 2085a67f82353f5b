"""Entry point of the write_grid_profiles rule (logic: zerogate.bench.grid_points): the whole grid checked,
then one profile per point; a bad point stops the rule with one line, nothing written."""

from pathlib import Path

from zerogate.bench.grid_points import write_profiles
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError

try:
    with logging_to(snakemake.log[0]) as log:
        written = write_profiles(
            repo_root(snakemake), Path(snakemake.output.profiles[0]).parent, snakemake.input.grid
        )
        # The grid's points are the rule's outputs (read when the workflow loaded): the same files.
        assert sorted(map(str, written)) == sorted(snakemake.output.profiles), "the grid changed while it ran"
        for path in written:
            log.info("wrote %s", path)
except InputError as error:
    fail(str(error))
