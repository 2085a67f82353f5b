"""Entry point of the prepare_model rule (logic: zerogate.model.build, zerogate.model.sources)."""

from pathlib import Path

from zerogate.config.model_data import ModelSettings
from zerogate.contracts.base import typed
from zerogate.entry import fail, logging_to, repo_root
from zerogate.errors import InputError
from zerogate.model.prepare import materialise
from zerogate.model.sources import parse_source

try:
    with logging_to(snakemake.log[0]) as log:
        model = typed(ModelSettings, snakemake.params.model)
        source = parse_source(model.source, str(repo_root(snakemake)))
        info = materialise(source, Path(snakemake.output.model).parent, snakemake.params.profile_file, model)
        log.info("model: %s", info)
except (InputError, FileNotFoundError) as error:
    Path(snakemake.output.model).unlink(missing_ok=True)
    fail(str(error))
