"""Entry point of the record_provenance rule (logic: zerogate.provenance)."""

from zerogate.contracts.data import DatasetManifest
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import DsConfig
from zerogate.entry import logging_to, repo_root
from zerogate.provenance import RunIdentity, RunRecords, provenance

with logging_to(snakemake.log[0]):
    inputs, params = snakemake.input, snakemake.params
    provenance(
        RunIdentity(
            profile_name=params.profile_name,
            profile=params.profile,
            config_hash=params.config_hash,
            run_id=params.run_id,
        ),
        RunRecords(
            fingerprint=Fingerprint.read(inputs.fingerprint),
            manifest=DatasetManifest.read(inputs.manifest),
            ds_config=DsConfig.read(inputs.ds_config).raw,
            summary=TrainSummary.read(inputs.summary),
        ),
        repo=str(repo_root(snakemake)),
    ).write(snakemake.output.provenance)
