"""Entry point of the measure_runtime_baseline rule (logic: zerogate.runtime.baseline)."""

from zerogate.contracts.plan import BaselineMeasurement, RuntimeBaseline
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to
from zerogate.runtime.baseline import measure_runtime_baseline
from zerogate.units import GIB

with logging_to(snakemake.log[0]) as log:
    run_spec = RunSpec.read(snakemake.input.run_spec)
    baseline = None
    if run_spec.accelerator == "cpu":
        # The ranks' environment (DS_ACCELERATOR, thread counts) and backend, as the launcher sets them.
        baseline = BaselineMeasurement.of(
            measure_runtime_baseline(
                env=run_spec.env,
                backend=run_spec.backend,
                ds_config=DsConfig.read(snakemake.input.ds_config).raw,
                split=snakemake.input.train_split,
            ),
            "the runtime baseline",
        )
        log.info(
            "runtime baseline %.3f GiB (range %s): %s",
            baseline.peak_rss_bytes / GIB,
            [round(b / GIB, 3) for b in baseline.peak_rss_range_bytes],
            baseline.how,
        )
    else:  # on GPUs the peak is the allocator's: the CUDA context is a term of its own
        log.info("accelerator %s: no resident-set baseline", run_spec.accelerator)
    RuntimeBaseline(accelerator=run_spec.accelerator, baseline=baseline).write(snakemake.output.baseline)
