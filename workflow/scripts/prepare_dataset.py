"""Entry point of the prepare_dataset rule (logic: zerogate.data.dataset, zerogate.data.sources)."""

from pathlib import Path

from zerogate.config.model_data import DatasetSettings
from zerogate.contracts.base import typed
from zerogate.contracts.data import ModelInfo
from zerogate.data.prepare import prepare
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError

try:
    with logging_to(snakemake.log[0]) as log:
        # profile_file: the file named in errors such as a tokenizer too large for dataset.vocab_size.
        manifest = prepare(
            typed(DatasetSettings, snakemake.params.settings),
            Path(snakemake.output.manifest).parent,
            ModelInfo.read(snakemake.input.model),
            str(repo_root(snakemake)),
            profile_file=snakemake.params.profile_file,
        )
        log.info("dataset %s: %s", manifest.content_sha256, {k: v.rows for k, v in manifest.splits.items()})
except InputError as error:
    Path(snakemake.output.manifest).unlink(missing_ok=True)
    fail(str(error))
