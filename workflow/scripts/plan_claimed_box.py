"""Entry point of the plan_claimed_box rule: the claimed profile rendered and planned for the claimed box
in-process (zerogate.render.ds_config.render, zerogate.predict.planner.plan_for_run)."""

from zerogate.config.launch import PlanSettings
from zerogate.config.machines import target_machine
from zerogate.config.model_data import ModelSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.run import DsConfig
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.predict.plan_text import summary
from zerogate.predict.planner import plan_for_run
from zerogate.render.claim import read_claim
from zerogate.render.ds_config import RenderInputs, render
from zerogate.render.overlay import with_suggestion_profiles

with logging_to(snakemake.log[0]) as log:
    params = snakemake.params
    try:
        machine, fingerprint = target_machine(snakemake.input.description, None, "")
        ds_config, _, run_spec = render(
            read_claim(snakemake.input.template),
            RenderInputs(
                model=typed(ModelSettings, params.model),
                training=typed(RunTraining, params.training),
                overrides=params.overrides,
                seq_len=params.seq_len,
                vocab_size=params.vocab_size,
                fingerprint=fingerprint,
                template_file=snakemake.input.template,
            ),
        )
        plan = plan_for_run(
            run_spec,
            DsConfig.of(ds_config, snakemake.input.template),
            machine,
            typed(PlanSettings, params.plan),
            params.profile_name,
        )
    except InputError as error:
        fail(str(error))
    plan = with_suggestion_profiles(
        plan,
        snakemake.output.suggestions,
        params.profile_name,
        typed(RunTraining, params.training),
        params.overrides,
        snakemake.input.description,
    )
    log.info("\n%s", summary(plan))
    plan.write(snakemake.output.plan)
