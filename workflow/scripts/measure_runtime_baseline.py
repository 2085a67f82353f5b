"""Entry point of the measure_runtime_baseline rule (logic: zerogate.plan.probe.measure_runtime_baseline)."""
from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.probe import measure_runtime_baseline
from zerogate.units import GIB

with logging_to(snakemake.log[0]) as log:
    run_spec = read_json(snakemake.input.run_spec)
    if run_spec["accelerator"] == "cpu":
        # The ranks' environment (DS_ACCELERATOR, thread counts) and backend, as the launcher sets them.
        baseline = measure_runtime_baseline(env=run_spec["env"], backend=run_spec["backend"],
                                            ds_config=read_json(snakemake.input.ds_config),
                                            split=snakemake.input.train_split)
        log.info("runtime baseline %.3f GiB (range %s): %s", baseline["peak_rss(bytes)"] / GIB,
                 [round(b / GIB, 3) for b in baseline["peak_rss_range(bytes)"]], baseline["how"])
    else:  # on GPUs the peak is the allocator's: the CUDA context is a term of its own
        baseline = None
        log.info("accelerator %s: no resident-set baseline", run_spec["accelerator"])
    write_json(snakemake.output.baseline, {"accelerator": run_spec["accelerator"], "baseline": baseline})
