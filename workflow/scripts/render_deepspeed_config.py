"""Entry point of the render_deepspeed_config rule (logic: zerogate.render.ds_config)."""

import json
from pathlib import Path

from zerogate.config.machines import target_machine
from zerogate.config.model_data import ModelSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError
from zerogate.render.claim import read_claim
from zerogate.render.ds_config import RenderInputs, render
from zerogate.runtime.nodes import layout

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    try:
        _, fingerprint = target_machine(inputs.get("description"), inputs.get("fingerprint"), params.machine)
        accelerator = fingerprint.accelerator
        # The profile's nodes section, checked before anything launches (hostfile, ranks per node against
        # a node's devices, the node count); the Slurm allocation is checked again at launch.
        nodes = layout(
            params.nodes,
            params.nodes_file,
            repo_root(snakemake),
            accelerator.count if accelerator.kind == "cuda" else None,
        )
        ds_config, deviations, run_spec = render(
            read_claim(inputs.template),
            RenderInputs(
                model=typed(ModelSettings, params.model),
                training=typed(RunTraining, params.training),
                overrides=params.overrides,
                seq_len=params.seq_len,
                vocab_size=params.vocab_size,
                fingerprint=fingerprint,
                template_file=inputs.template,
                profile_file=params.profile_file,
                batch_file=params.batch_file,
                nodes=nodes,
                nodes_section=params.nodes,
            ),
        )
    except InputError as error:  # a misspelt key, an unresolvable "auto", a config DeepSpeed rejects
        log.error("%s", error)
        fail(str(error))
    Path(snakemake.output.ds_config).write_text(json.dumps(ds_config, indent=2) + "\n")
    deviations.write(snakemake.output.deviations)
    run_spec.write(snakemake.output.run_spec)
    for deviation in deviations.deviations:
        log.info("deviation %s (%s): %s", deviation.path, deviation.kind, deviation.reason)
