# Shared helpers: load and validate the configuration and the chosen profile, compute the
# result paths' wildcards and the per-rule parameters. No rule lives here.
import datetime
import re
import socket
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from zerogate import __version__ as PIPELINE_VERSION
from zerogate.errors import InputError
from zerogate.hashing import sha256_json
from zerogate.config.settings import training_settings
from zerogate.config.machine_id import machine_id_from_host
from zerogate.config.profile import check_profile, file_defining, load_profile_chain, resolve_profile
from zerogate.config.validation import key_path, to_input_error

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
# The loss stabiliser's settings with defaults filled in: the spike rule the analysis replays.
STABILISER_SETTINGS = training_settings(PROFILE)["stabiliser"]
MACHINE = machine_id_from_host(socket.gethostname()) if config["machine"] == "auto" else config["machine"]
# A described machine (config/machines/<name>.yaml) is planned for, never probed; "auto" takes its file name.
MACHINE_DESCRIPTION = config.get("machine_description")
if MACHINE_DESCRIPTION:
    if not (REPO / MACHINE_DESCRIPTION).is_file():
        fail(InputError(config_source(["machine_description"]), "machine_description", f"no such file: {MACHINE_DESCRIPTION}"))
    if config["machine"] == "auto":
        MACHINE = Path(MACHINE_DESCRIPTION).stem
CONFIG_HASH = sha256_json({"profile": PROFILE, "pipeline_version": PIPELINE_VERSION})
# A run is this pipeline version, this resolved profile, on this machine.
RUN_ID = f"{PROFILE_NAME}-{MACHINE}-{CONFIG_HASH[:8]}"
# Output paths are fixed when the DAG is built, so the report's date is that moment's UTC date: a report
# built on another day gets a new file beside the old one (the inputs are unchanged, so only the report
# and the registry are rebuilt).
REPORT_DATE = (
    datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    if config["report_date"] == "today"
    else config["report_date"]
)
STRICT = config["strict"]


def profile_file_setting(key):
    """The profile file that sets ``key`` (dotted), for error messages of rules that check it later."""
    chain = load_profile_chain(PROFILES, PROFILE_NAME, CONFIG_FILE, "profile")
    return str(file_defining(chain, key.split("."))).replace(f"{REPO}/", "")


def check_model_source():
    """Issue 6: a model path that does not exist or a GGUF transformers cannot load stops here."""
    from zerogate.model.sources import check_model_section

    try:
        check_model_section(PROFILE["model"], profile_file_setting("model.source"), REPO)
    except InputError as error:
        fail(error)


check_model_source()


def dataset_files():
    """Issue 6: a local dataset file is an input of prepare_dataset, so editing it re-runs the stage."""
    source = PROFILE["dataset"]["source"]
    return [] if source == "builtin-tasks" or source.startswith("hub:") else [source]

# Rules take their parameters from the loaded profile, so only that profile's results can be built
# in one invocation (another profile's results are left as they are).
wildcard_constraints:
    profile=re.escape(PROFILE_NAME),
    machine=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    version=re.escape(PIPELINE_VERSION),
    run_id=re.escape(RUN_ID),
    date=r"\d{4}-\d{2}-\d{2}",
    variant="|".join(re.escape(v) for v in PROFILE.get("variants", [])) or "(?!)",


def final_targets():
    if MACHINE_DESCRIPTION:  # a described machine is planned for, never trained on
        return [plan_target()]
    base = f"results/{PROFILE_NAME}/{MACHINE}"
    targets = [
        f"{base}/gates/verdicts.json",
        f"{base}/report/zerogate-v{PIPELINE_VERSION}-{RUN_ID}-{REPORT_DATE}.html",
        f"{base}/registry.json",
        plan_target(),
        f"{base}/ledger/ledger_vs_measured.json",
    ]
    if STRICT:
        targets.append(f"{base}/gates/strict-v{PIPELINE_VERSION}-{RUN_ID}-{REPORT_DATE}.passed")
    return targets


def report_file(wildcards):
    """This run's versioned report (for the run registry)."""
    return f"results/{wildcards.profile}/{wildcards.machine}/report/zerogate-v{PIPELINE_VERSION}-{RUN_ID}-{REPORT_DATE}.html"


def compare_registries():
    """The run registries the compare target reads: config["compare"] run directories, or every
    results/*/*/registry.json present now."""
    if config["compare"]:
        return [d if d.endswith(".json") else str(Path(d) / "registry.json") for d in config["compare"]]
    return sorted(str(p) for p in Path("results").glob("*/*/registry.json"))


def compare_inputs(wildcards):
    """The compare rule's registries (only evaluated when the compare target is asked for): stops with
    one line when a listed run has none, or when fewer than two runs are found."""
    registries = compare_registries()
    missing = [r for r in registries if not Path(r).exists()]
    if missing:
        fail(f"{config_source(['compare'])}: compare: no run registry at {', '.join(missing)}")
    if len(registries) < 2:
        fail(f"{config_source(['compare'])}: compare: {len(registries)} run(s) found, need two "
             "(list run directories under compare, or run the pipeline for another profile or machine)")
    return {"registries": [ancient(r) for r in registries]}


def _compare_id():
    """Names the comparison after the runs it holds, so comparisons of other sets never overwrite it."""
    return sha256_json(compare_registries())[:8]


COMPARE_ID = _compare_id()


def plan_machine_input(wildcards):
    """The planner reads the described machine when one is given, else this machine's probe."""
    if MACHINE_DESCRIPTION and wildcards.machine == MACHINE:
        return {"description": MACHINE_DESCRIPTION}
    return {"fingerprint": f"results/{wildcards.profile}/{wildcards.machine}/probe/hardware.json"}


def plan_target():
    return f"results/{PROFILE_NAME}/{MACHINE}/plan/plan.txt"


def profile_sections(*names):
    """The named sections of the profile (those it has), e.g. for a rule that must not see the gates."""
    return {name: PROFILE[name] for name in names if name in PROFILE}


def checkpoint_dir(wildcards):
    """Checkpoints of a training run: beside its outputs, never one of them (they must outlive a crash)."""
    base = f"results/{wildcards.profile}/{wildcards.machine}"
    variant = getattr(wildcards, "variant", None)
    return f"{base}/variants/{variant}/checkpoints" if variant else f"{base}/checkpoints"


def variant_summaries(wildcards):
    """Every comparison run the profile lists (key `variants`)."""
    base = f"results/{wildcards.profile}/{wildcards.machine}/variants"
    return [f"{base}/{variant}/train/summary.json" for variant in PROFILE.get("variants", [])]
