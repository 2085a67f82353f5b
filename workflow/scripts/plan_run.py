"""Entry point of the plan_run rule (logic: zerogate.plan.planner): the plan, whether or not the run fits."""
from zerogate.entry import fail, logging_to
from zerogate.io import read_json, write_json
from zerogate.errors import InputError
from zerogate.config.machines import from_fingerprint, load_description, to_fingerprint
from zerogate.plan.planner import plan_for_profile, summary

with logging_to(snakemake.log[0]) as log:
    try:
        if "description" in snakemake.input.keys():
            machine = load_description(snakemake.input.description)
            fingerprint = to_fingerprint(machine)
        else:
            fingerprint = read_json(snakemake.input.fingerprint)
            machine = from_fingerprint(fingerprint, snakemake.wildcards.machine)
        profile = {**snakemake.params.sections, "deepspeed": snakemake.params.deepspeed}
        result, ds_config = plan_for_profile(profile, read_json(snakemake.input.template), snakemake.input.template,
                                             fingerprint, machine)
    except InputError as error:
        fail(str(error))
    log.info("\n%s", summary(result))
    write_json(snakemake.output.ds_config, ds_config)
    write_json(snakemake.output.plan, result)
