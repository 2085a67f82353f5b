"""Entry point of the replan_with_measured_compute and predict_step_time rules (logic:
zerogate.predict.planner.with_measured_compute): plan_run's plan with its step time predicted with this
machine's micro-benchmarked rates, and (replan_with_measured_compute, which has the input) the measured
compute term in its floor."""

from zerogate.config.machines import target_machine
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.plan import ModelCompute, Plan
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.plan_text import summary
from zerogate.predict.planner import with_measured_compute

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    try:
        machine, _ = target_machine(inputs.get("description"), inputs.get("fingerprint"), params.machine)
        result = with_measured_compute(
            Plan.read(inputs.plan),
            RunSpec.read(inputs.run_spec),
            DsConfig.read(inputs.ds_config),
            machine,
            ModelCompute.read(inputs.model_compute).measurement if "model_compute" in inputs.keys() else None,
            rates_from_microbench(Microbench.read(inputs.microbench), inputs.microbench),
        )
    except (InputError, ValueError) as error:
        fail(str(error))
    log.info("\n%s", summary(result))
    result.write(snakemake.output.plan)
