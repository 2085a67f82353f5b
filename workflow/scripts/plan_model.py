"""Entry point of the plan_model_run rule (logic: zerogate.predict.model_plan): the model planned on the box,
the plan, its DeepSpeed config, its answer (printed) and its full text."""

import json
from pathlib import Path

from zerogate.config.plan_request import plan_request, read_base
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError
from zerogate.predict.model_plan import plan_model
from zerogate.predict.plan_answer import answer
from zerogate.predict.plan_text import summary

with logging_to(snakemake.log[0]) as log:
    output = snakemake.output
    repo = repo_root(snakemake)
    try:
        request = plan_request(snakemake.params.values, repo)
        plan, ds_config = plan_model(request, read_base(repo))
    except InputError as error:
        fail(str(error))
    plan.write(output.plan)
    Path(output.ds_config).write_text(json.dumps(ds_config.raw, indent=2) + "\n")
    text = answer(plan, ds_config, [output.plan, output.ds_config, output.summary])
    Path(output.answer).write_text(text + "\n")
    Path(output.summary).write_text(summary(plan) + "\n")
    log.info("\n%s", text)
