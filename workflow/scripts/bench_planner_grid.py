"""Entry point of the bench_planner_grid rule (logic: zerogate.bench.planner_grid): the grid's table written
(JSON, text, markdown) and printed."""

import sys
from pathlib import Path

from zerogate.bench.planner_grid import grid_table, markdown, read_point, text
from zerogate.contracts.records import GitState
from zerogate.entry import logging_to, repo_root
from zerogate.provenance import git_state

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    runs = [
        read_point(point, *files)
        for point, *files in zip(
            snakemake.params.points, inputs.ledger, inputs.run_spec, inputs.ds_config, inputs.train_benchmark
        )
    ]
    repo = repo_root(snakemake)
    table = grid_table(runs, inputs.grid, Path(inputs.grid).read_bytes(), GitState(**git_state(repo)))
    table.write(snakemake.output.data)
    lines = text(table)
    Path(snakemake.output.table).write_text(lines + "\n")
    Path(snakemake.output.markdown).write_text(markdown(table))
    log.info("\n%s", lines)
    print(lines, file=sys.__stderr__)
