"""Entry point of the validate_planner rule (logic: zerogate.bench.planner_validation, judging and the
table: zerogate.analysis.planner_validation). The table is checked whole before any row is planned: a
malformed row stops the rule with one line naming the file, the row and the key, and writes nothing."""

import os
import sys
from pathlib import Path

from zerogate.analysis.planner_validation import table_text
from zerogate.bench.planner_validation import validate
from zerogate.bench.step_time_judged import check_table
from zerogate.bench.step_time_rows import first_summary, report_lines
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError

with logging_to(snakemake.log[0]) as log:
    try:
        validation = validate(
            repo_root(snakemake),
            snakemake.input.setups,
            snakemake.input.grid[0] if snakemake.input.grid else None,
        )
        # The published step times: each pre-registered row by its first prediction, then every row by the
        # ledger as it stands (zerogate.bench.step_time_rows.report_lines).
        step_times = check_table(
            repo_root(snakemake), snakemake.input.step_times, list(snakemake.input.preregistered)
        )
    except InputError as error:
        fail(str(error))
    # The step-time group goes after the memory groups, before their summary line (which stays last).
    *groups, summary = table_text(validation, first_summary(step_times)).rstrip("\n").splitlines()
    text = "\n".join([*groups, *report_lines(step_times), "", summary, ""])
    log.info("\n%s", text)
    table = Path(snakemake.output.table)
    table.parent.mkdir(parents=True, exist_ok=True)
    tmp = table.with_name(table.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, table)
    validation.write(snakemake.output.validation)
    print(text, file=sys.__stdout__, end="")
