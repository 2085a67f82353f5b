"""Entry point of the measure_model_compute rule (logic:
zerogate.predict.compute.measure_forward_backward)."""

import os

from zerogate.contracts.plan import ModelCompute, ModelComputeMeasurement
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    run_spec, ds_config = RunSpec.read(snakemake.input.run_spec), DsConfig.read(snakemake.input.ds_config)
    measurement = None
    if run_spec.accelerator == "cpu":
        os.environ.update(run_spec.env)
        # Imported here, once the rank's environment (DS_ACCELERATOR, thread counts) is set: the compute
        # module imports torch and DeepSpeed, which read it.
        from zerogate.predict.compute import measure_forward_backward
        from zerogate.runtime.probe import captured_output

        # DeepSpeed checks its ops by compiling and linking test programs (async_io's `cannot find -laio`):
        # their output goes to this rule's log, never the console.
        with captured_output() as output:
            measured = measure_forward_backward(run_spec, ds_config)
            chatter = output()
        log.info("output of the measurement (DeepSpeed, compilers):\n%s", chatter)
        measurement = ModelComputeMeasurement.of(measured, "the compute measurement")
        log.info(
            "model forward + backward: %.4f s (fastest; all %s): %s",
            measurement.forward_backward_s,
            [round(s, 4) for s in measurement.samples_s],
            measurement.how,
        )
    else:  # on GPUs the host dispatches while the device computes: the arithmetic term is the floor's compute
        log.info("accelerator %s: the model's forward + backward is not timed", run_spec.accelerator)
    ModelCompute(accelerator=run_spec.accelerator, measurement=measurement).write(snakemake.output.compute)
