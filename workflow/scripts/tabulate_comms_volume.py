"""Entry point of the tabulate_comms_volume rule (logic: zerogate.analysis.comms)."""

from zerogate.analysis.comms import load_records, tabulate
from zerogate.entry import logging_to
from zerogate.units import format_bytes

with logging_to(snakemake.log[0]) as log:
    table = tabulate(load_records(snakemake.input.records))
    for row in table.rows:
        if row.status != "run":
            log.info("%s g%d: not run: %s", row.scheme, row.accumulation, row.reason)
            continue
        log.info(
            "%s g%d: measured %s, theory %s per rank and optimizer step (ratio %.4f)%s",
            row.scheme,
            row.accumulation,
            format_bytes(row.measured_volume_bytes),
            format_bytes(row.theory.volume_bytes),
            row.ratio or float("nan"),
            "" if row.within_tolerance else "  OUTSIDE +-5 %",
        )
    table.write(snakemake.output.table)
