"""Entry point of the plan_run rule (logic: zerogate.predict.planner): the plan, whether or not the run
fits, each change it suggests written as a profile."""

from zerogate.config.launch import PlanSettings
from zerogate.config.machines import target_machine
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.predict.plan_text import summary
from zerogate.predict.planner import plan_for_run
from zerogate.render.overlay import with_suggestion_profiles

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    try:
        machine, _ = target_machine(inputs.get("description"), inputs.get("fingerprint"), params.machine)
        result = plan_for_run(
            RunSpec.read(inputs.run_spec),
            DsConfig.read(inputs.ds_config),
            machine,
            typed(PlanSettings, params.plan),
            params.profile_name,
        )
    except InputError as error:
        fail(str(error))
    result = with_suggestion_profiles(
        result,
        snakemake.output.suggestions,
        params.profile,
        typed(RunTraining, params.training),
        params.overrides,
        inputs.get("description"),
        stem=params.profile_name,
    )
    log.info("\n%s", summary(result))
    result.write(snakemake.output.plan)
