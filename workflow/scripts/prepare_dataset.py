"""Entry point of the prepare_dataset rule (logic: zerogate.data.dataset, zerogate.data.sources)."""
from pathlib import Path

from zerogate.data.dataset import prepare
from zerogate.entry import fail, logging_to, repo_root
from zerogate.io import read_json
from zerogate.errors import InputError

try:
    with logging_to(snakemake.log[0]) as log:
        # profile_file: the file named in errors such as a tokenizer too large for dataset.vocab_size.
        manifest = prepare(snakemake.params.settings, Path(snakemake.output.manifest).parent,
                           read_json(snakemake.input.model), str(repo_root(snakemake)), snakemake.params.evaluation,
                           profile_file=getattr(snakemake.params, "profile_file", "profile"))
        log.info("dataset %s: %s", manifest["content_sha256"], manifest["splits"])
except InputError as error:
    Path(snakemake.output.manifest).unlink(missing_ok=True)
    fail(str(error))
