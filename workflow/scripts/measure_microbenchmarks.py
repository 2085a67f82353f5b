"""Entry point of the measure_microbenchmarks rule (logic: zerogate.predict.microbench.measure, called with
the rank's environment by zerogate.predict.microbench_files.measure_rendered; timing:
zerogate.runtime.microbench)."""

from zerogate.entry import logging_to
from zerogate.predict.microbench_files import measure_rendered

with logging_to(snakemake.log[0]) as log:
    log.info("started")
    # DeepSpeed's op loading prints its checks: to this rule's log, never the console.
    bench, chatter = measure_rendered(
        snakemake.input.run_spec, snakemake.input.ds_config, snakemake.input.fingerprint
    )
    if chatter.strip():
        log.info("output of the measurement (DeepSpeed):\n%s", chatter)
    for row in bench.matmuls:
        log.info(
            "%s %dx%dx%d (x%d, %s): %.3g flop/s [%.3g, %.3g]",
            row.kind,
            row.m,
            row.n,
            row.k,
            row.count,
            ", ".join(row.layers),
            row.rate.median,
            row.rate.q1,
            row.rate.q3,
        )
    for row in bench.copies:
        log.info(
            "copy %s%s %d B: %.3g bytes/s [%.3g, %.3g]",
            row.route,
            "" if row.pinned is None else (" pinned" if row.pinned else " pageable"),
            row.size_bytes,
            row.rate.median,
            row.rate.q1,
            row.rate.q3,
        )
    for row in bench.optimizer:
        log.info(
            "update %s on %s, %d parameters: %.3g param/s [%.3g, %.3g] (%s)",
            row.implementation,
            row.device,
            row.parameters,
            row.rate.median,
            row.rate.q1,
            row.rate.q3,
            row.why,
        )
    log.info(
        "measured in %.1f s with %.0f %% of %d core(s): %s",
        bench.seconds_s,
        100 * (bench.cpu_share or 0),
        bench.threads,
        bench.how,
    )
    bench.write(snakemake.output.microbench)
    log.info("written")
