"""Entry point of the compare_runs rule (logic: zerogate.analysis.compare; drawn and rendered by
zerogate.report.compare)."""

from pathlib import Path

from zerogate.analysis.compare import group_runs, histories, load_run, noise_summary
from zerogate.analysis.compare_table import comparison_table
from zerogate.entry import logging_to
from zerogate.report.compare import history_figure, overlay_figure, render_comparison

with logging_to(snakemake.log[0]) as log:
    reference = snakemake.params.get("reference") or None  # config compare_reference: a machine id
    runs = [load_run(path) for path in snakemake.input.registries]
    comparison = group_runs(runs, reference)
    found = histories(runs)
    comparison_table(comparison).to_csv(snakemake.output.table, index=False)
    overlay_figure(comparison, "loss", "training loss (nats/token)", snakemake.output.loss)
    overlay_figure(
        comparison, "step_time", "optimizer-step wall time (s), slowest rank", snakemake.output.step_time
    )
    history_figure(found, snakemake.output.history)
    figures = {
        "loss": snakemake.output.loss,
        "step_time": snakemake.output.step_time,
        "history": snakemake.output.history if found else None,
    }
    Path(snakemake.output.html).write_text(render_comparison(comparison, figures, reference, found))
    for number, group in enumerate(comparison.groups, start=1):
        noise = noise_summary(group)
        log.info(
            "group %d (%s): %s, reference %s; beyond noise: %s",
            number,
            group.title,
            ", ".join(group.machines),
            group.reference,
            noise["beyond"] or "none",
        )
    for straggler in comparison.stragglers:
        log.info("%s: not comparable: %s", straggler.run.run_id, straggler.reason)
