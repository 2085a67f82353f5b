"""Entry point of the measure_microbenchmarks rule (logic: zerogate.predict.microbench.measure; timing:
zerogate.runtime.microbench)."""

import os

from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    log.info("started")
    run_spec, ds_config = RunSpec.read(snakemake.input.run_spec), DsConfig.read(snakemake.input.ds_config)
    fingerprint = Fingerprint.read(snakemake.input.fingerprint)
    os.environ.update(run_spec.env)
    # Imported here, once the rank's environment (DS_ACCELERATOR, thread counts) is set: the module imports
    # torch, and loads DeepSpeed's CPU Adam op, which read it.
    from zerogate.predict.microbench import measure
    from zerogate.runtime.probe import captured_output

    # DeepSpeed's op loading prints its checks: to this rule's log, never the console.
    with captured_output() as output:
        bench = measure(run_spec, ds_config, fingerprint.collectives, str(snakemake.input.fingerprint))
        chatter = output()
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
