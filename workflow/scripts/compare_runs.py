"""Entry point of the compare_runs rule (logic: zerogate.report.compare)."""
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.report.compare import comparison_table, group_runs, load_run, overlay_figure, render_comparison

with logging_to(snakemake.log[0]) as log:
    reference = snakemake.params.get("reference") or None  # config compare_reference: a machine id
    comparison = group_runs([load_run(path) for path in snakemake.input.registries], reference)
    comparison_table(comparison).to_csv(snakemake.output.table, index=False)
    overlay_figure(comparison, "loss", "training loss (nats/token)", snakemake.output.loss)
    overlay_figure(comparison, "step_time", "optimizer-step wall time (s), slowest rank", snakemake.output.step_time)
    figures = {"loss": snakemake.output.loss, "step_time": snakemake.output.step_time}
    Path(snakemake.output.html).write_text(render_comparison(comparison, figures, reference))
    for number, group in enumerate(comparison.groups, start=1):
        log.info("group %d (%s): %s, reference %s", number, group.title, ", ".join(group.machines), group.reference)
    for straggler in comparison.stragglers:
        log.info("%s: not comparable: %s", straggler.run.run_id, straggler.reason)
