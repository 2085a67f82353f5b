"""Entry point of the plan_claimed_box rule: the claimed profile rendered and planned for the claimed box
in-process (zerogate.plan.ds_config.render, zerogate.plan.planner.plan_for_profile)."""
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.io import read_json, write_json
from zerogate.plan.ds_config import render
from zerogate.plan.planner import plan_for_profile, summary, target_machine

with logging_to(snakemake.log[0]) as log:
    profile = snakemake.params.profile
    try:
        machine, fingerprint = target_machine(snakemake.input.description, None, "")
        ds_config, _, run_spec = render(read_json(snakemake.input.template), profile, fingerprint, snakemake.input.template)
        plan = plan_for_profile(profile, ds_config, run_spec, machine)
    except InputError as error:
        fail(str(error))
    plan["profile"] = snakemake.params.profile_name
    log.info("\n%s", summary(plan))
    write_json(snakemake.output.plan, plan)
