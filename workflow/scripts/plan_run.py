"""Entry point of the plan_run and replan_with_measured_compute rules (logic: zerogate.plan.planner): the plan,
whether or not the run fits; the second with the measured compute term in its floor."""
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.io import read_json, write_json
from zerogate.plan.planner import plan_for_profile, summary, target_machine

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    try:
        machine, _ = target_machine(inputs.get("description"),
                                    read_json(inputs.fingerprint) if "fingerprint" in inputs.keys() else None,
                                    snakemake.params.machine)
        model_compute = read_json(inputs.model_compute)["measurement"] if "model_compute" in inputs.keys() else None
        result = plan_for_profile(snakemake.params.sections, read_json(inputs.ds_config), read_json(inputs.run_spec),
                                  machine, model_compute)
    except InputError as error:
        fail(str(error))
    log.info("\n%s", summary(result))
    write_json(snakemake.output.plan, result)
