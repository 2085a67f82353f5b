"""Entry point of the compare_runs rule (logic: zerogate.report.compare)."""
from pathlib import Path

from zerogate.report.compare import comparison_table, flags, load_run, overlay_figure, render_comparison
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    runs = [load_run(path) for path in snakemake.input.registries]
    table = comparison_table(runs)
    table.to_csv(snakemake.output.table, index=False)
    overlay_figure(runs, "loss", "training loss (nats/token)", snakemake.output.loss)
    overlay_figure(runs, "step_time(s)", "optimizer-step wall time (s), slowest rank", snakemake.output.step_time)
    figures = {"loss": snakemake.output.loss, "step_time": snakemake.output.step_time}
    Path(snakemake.output.html).write_text(render_comparison(runs, table, figures))
    for run_id, differs in flags(runs).items():
        log.info("%s: %s", run_id, "; ".join(differs) or "comparable")
