"""Entry point of the measure_model_compute rule (logic: zerogate.plan.compute.measure_forward_backward)."""
import os

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.model.build import planned_model_config

with logging_to(snakemake.log[0]) as log:
    run_spec, ds_config = read_json(snakemake.input.run_spec), read_json(snakemake.input.ds_config)
    if run_spec["accelerator"] == "cpu":
        # A rank's environment (DS_ACCELERATOR, thread counts) before torch and DeepSpeed are imported.
        os.environ.update(run_spec["env"])
        from zerogate.plan.compute import measure_forward_backward

        sections = snakemake.params.sections
        measurement = measure_forward_backward(
            planned_model_config(sections["model"], sections["dataset"]), ds_config["train_micro_batch_size_per_gpu"],
            sections["dataset"]["seq_len"], run_spec["dtype"], threads=int(run_spec["env"]["OMP_NUM_THREADS"]),
            ds_config=ds_config, backend=run_spec["backend"])
        log.info("model forward + backward: %.4f s (fastest; all %s): %s", measurement["forward_backward(s)"],
                 [round(s, 4) for s in measurement["samples(s)"]], measurement["how"])
    else:  # on GPUs the host dispatches while the device computes: the arithmetic term is the floor's compute
        measurement = None
        log.info("accelerator %s: the model's forward + backward is not timed", run_spec["accelerator"])
    write_json(snakemake.output.compute, {"accelerator": run_spec["accelerator"], "measurement": measurement})
