"""Entry point of the prepare_dataset rule (logic: zerogate.dataset)."""
from pathlib import Path

from zerogate.dataset import prepare
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    manifest = prepare(snakemake.params.settings, Path(snakemake.output.manifest).parent)
    log.info("dataset %s: %s", manifest["content_sha256"], manifest["splits"])
