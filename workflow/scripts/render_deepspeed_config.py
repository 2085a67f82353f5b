"""Entry point of the render_deepspeed_config rule (logic: zerogate.plan.ds_config)."""
from pathlib import Path

from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError
from zerogate.io import read_json, write_json
from zerogate.plan.ds_config import render
from zerogate.plan.planner import target_machine
from zerogate.train.nodes import layout

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    profile = {"model": snakemake.params.model, "training": snakemake.params.training,
               "deepspeed": snakemake.params.deepspeed, "nodes": snakemake.params.nodes}
    try:
        _, fingerprint = target_machine(inputs.get("description"),
                                        read_json(inputs.fingerprint) if "fingerprint" in inputs.keys() else None,
                                        snakemake.params.machine)
        accelerator = fingerprint["accelerator"]
        # The profile's nodes section, checked before anything launches (hostfile, ranks per node against
        # a node's devices, the node count); the Slurm allocation is checked again at launch.
        nodes = layout(snakemake.params.nodes, snakemake.params.nodes_file, repo_root(snakemake),
                       accelerator["count"] if accelerator["kind"] == "cuda" else None)
        ds_config, deviations, run_spec = render(read_json(inputs.template), profile, fingerprint, inputs.template,
                                                 nodes)
    except InputError as error:  # a misspelt key, an unresolvable "auto", a config DeepSpeed rejects
        log.error("%s", error)
        fail(str(error))
    if run_spec["nodes"]:  # named in the launcher's errors (the Slurm allocation is checked at launch)
        run_spec["nodes"]["profile_file"] = snakemake.params.nodes_file
    write_json(snakemake.output.ds_config, ds_config)
    write_json(snakemake.output.deviations, deviations)
    write_json(snakemake.output.run_spec, run_spec)
    for deviation in deviations:
        log.info("deviation %s (%s): %s", deviation["path"], deviation["kind"], deviation["reason"])
