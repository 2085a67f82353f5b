"""Entry point of the measure_model_compute rule (logic: zerogate.plan.compute.measure_forward_backward)."""
import os

from zerogate.contracts.plan import ModelCompute, ModelComputeMeasurement
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    run_spec, ds_config = RunSpec.read(snakemake.input.run_spec), DsConfig.read(snakemake.input.ds_config)
    measurement = None
    if run_spec.accelerator == "cpu":
        # A rank's environment (DS_ACCELERATOR, thread counts) before torch and DeepSpeed are imported.
        os.environ.update(run_spec.env)
        from zerogate.plan.compute import measure_forward_backward

        measurement = ModelComputeMeasurement.of(measure_forward_backward(run_spec, ds_config), "the compute measurement")
        log.info("model forward + backward: %.4f s (fastest; all %s): %s", measurement.forward_backward_s,
                 [round(s, 4) for s in measurement.samples_s], measurement.how)
    else:  # on GPUs the host dispatches while the device computes: the arithmetic term is the floor's compute
        log.info("accelerator %s: the model's forward + backward is not timed", run_spec.accelerator)
    ModelCompute(accelerator=run_spec.accelerator, measurement=measurement).write(snakemake.output.compute)
