"""Entry point of the render_deepspeed_config rule (logic: zerogate.plan.ds_config)."""
from zerogate.entry import fail, logging_to
from zerogate.errors import InputError
from zerogate.io import read_json, write_json
from zerogate.plan.ds_config import render
from zerogate.plan.planner import target_machine

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    profile = {"model": snakemake.params.model, "training": snakemake.params.training,
               "deepspeed": snakemake.params.deepspeed}
    try:
        _, fingerprint = target_machine(inputs.get("description"),
                                        read_json(inputs.fingerprint) if "fingerprint" in inputs.keys() else None,
                                        snakemake.params.machine)
        ds_config, deviations, run_spec = render(read_json(inputs.template), profile, fingerprint, inputs.template)
    except InputError as error:  # a misspelt key, an unresolvable "auto", a config DeepSpeed rejects
        log.error("%s", error)
        fail(str(error))
    write_json(snakemake.output.ds_config, ds_config)
    write_json(snakemake.output.deviations, deviations)
    write_json(snakemake.output.run_spec, run_spec)
    for deviation in deviations:
        log.info("deviation %s (%s): %s", deviation["path"], deviation["kind"], deviation["reason"])
