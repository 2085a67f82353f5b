"""Entry point of the record_provenance rule (logic: zerogate.provenance)."""
from zerogate.entry import logging_to, repo_root
from zerogate.io import read_json, write_json
from zerogate.provenance import provenance

with logging_to(snakemake.log[0]):
    record = provenance(
        profile_name=snakemake.params.profile_name,
        profile=snakemake.params.profile,
        config_hash=snakemake.params.config_hash,
        run_id=snakemake.params.run_id,
        repo=str(repo_root(snakemake)),
        fingerprint=read_json(snakemake.input.fingerprint),
        manifest=read_json(snakemake.input.manifest),
        ds_config=read_json(snakemake.input.ds_config),
        summary=read_json(snakemake.input.summary),
    )
    write_json(snakemake.output.provenance, record)
