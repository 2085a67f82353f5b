# Shared helpers: load and validate the configuration and the chosen profile, compute the
# result paths' wildcards and the per-rule parameters. No rule lives here.
import re
import socket
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from zerogate import __version__ as PIPELINE_VERSION
from zerogate.errors import InputError
from zerogate.hashing import sha256_json
from zerogate.machine_id import machine_id_from_host
from zerogate.profile import check_profile, file_defining, load_profile_chain, resolve_profile
from zerogate.validation import key_path, to_input_error

REPO = Path(workflow.basedir)
CONFIG_FILE = "config/config.yaml"
SCHEMAS = REPO / "config" / "schemas"
PROFILES = REPO / "config" / "profiles"


def fail(error):
    """Stop before any job runs, with one line naming the file and the key."""
    sys.exit(f"zerogate: error: {str(error).replace(f'{REPO}/', '')}")


def config_source(key_path):
    """Where a top-level config key came from: the command line or a config file."""
    if key_path and key_path[0] in workflow.config_settings.config:
        return "--config"
    given = [str(f) for f in workflow.config_settings.configfiles]
    return given[-1] if given else CONFIG_FILE


def validated(data, schema, chain=None):
    """Snakemake's JSON-schema validation, its error turned into one line naming file and key."""
    try:
        validate(data, str(SCHEMAS / schema))
    except WorkflowError as error:
        # Snakemake raises while handling jsonschema's ValidationError: that one holds the key path.
        candidates = (error.__cause__, error.__context__, *error.args)
        cause = next((c for c in candidates if hasattr(c, "absolute_path")), None)
        if cause is None:
            raise
        path = key_path(cause)
        file = str(file_defining(chain, path)) if chain is not None else config_source(path)
        fail(to_input_error(file, cause))


def load_profile(name):
    try:
        chain = load_profile_chain(PROFILES, name, CONFIG_FILE, "profile")
        profile = resolve_profile(chain)
    except InputError as error:
        fail(error)
    validated(profile, "profile.schema.yaml", chain)
    try:
        check_profile(profile, chain, REPO)
    except InputError as error:
        fail(error)
    return profile


validated(config, "config.schema.yaml")
PROFILE_NAME = config["profile"]
PROFILE = load_profile(PROFILE_NAME)
MACHINE = machine_id_from_host(socket.gethostname()) if config["machine"] == "auto" else config["machine"]
CONFIG_HASH = sha256_json({"profile": PROFILE, "pipeline_version": PIPELINE_VERSION})
# A run is this pipeline version, this resolved profile, on this machine.
RUN_ID = f"{PROFILE_NAME}-{MACHINE}-{CONFIG_HASH[:8]}"

# Rules take their parameters from the loaded profile, so only that profile's results can be built
# in one invocation (another profile's results are left as they are).
wildcard_constraints:
    profile=re.escape(PROFILE_NAME),
    machine=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    version=re.escape(PIPELINE_VERSION),
    run_id=re.escape(RUN_ID),
    variant="|".join(re.escape(v) for v in PROFILE.get("variants", [])) or "(?!)",


def final_targets():
    base = f"results/{PROFILE_NAME}/{MACHINE}"
    return [
        f"{base}/gates/verdicts.json",
        f"{base}/report/zerogate-v{PIPELINE_VERSION}-{RUN_ID}.html",
    ]


def checkpoint_dir(wildcards):
    """Checkpoints of a training run: beside its outputs, never one of them (they must outlive a crash)."""
    base = f"results/{wildcards.profile}/{wildcards.machine}"
    variant = getattr(wildcards, "variant", None)
    return f"{base}/variants/{variant}/checkpoints" if variant else f"{base}/checkpoints"


def variant_summaries(wildcards):
    """Every comparison run the profile lists (key `variants`)."""
    base = f"results/{wildcards.profile}/{wildcards.machine}/variants"
    return [f"{base}/{variant}/train/summary.json" for variant in PROFILE.get("variants", [])]
