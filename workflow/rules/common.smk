# Shared helpers: load and validate the configuration and the chosen profile, compute the
# result paths' wildcards and the per-rule parameters. No rule lives here.
import datetime
import functools
import os
import re
import socket
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from zerogate import __version__ as PIPELINE_VERSION
from zerogate.errors import InputError
from zerogate.bench.grid_points import PROFILE_PREFIX, point_ids, profile_file_name
from zerogate.hashing import sha256_json
from zerogate.config.claims import claim_file, claim_name, load_claim
from zerogate.config.machine_id import machine_id_from_host
from zerogate.config.machines import described_machine
from zerogate.config.plan_request import BASE_FILE as PLAN_BASE_FILE, plan_request, read_base
from zerogate.config.profile import (
    check_profile,
    file_defining,
    load_profile_chain,
    profile_name,
    resolve_profile,
)
from zerogate.config.preregistered import registered_files
from zerogate.config.published_setups import read_setups
from zerogate.config.run_config import run_config
from zerogate.config.step_times import STEP_TIMES_FILE
from zerogate.config.validation import key_path, to_input_error
from zerogate.contracts.base import plain
from zerogate.data.sources import check_dataset_source
from zerogate.model.sources import check_model_source
from zerogate.render.claim import read_claim
from zerogate.render.variants import PEERS_BENCHMARK, engine_of, trained
from zerogate.render.world import check_described_world
from zerogate.runtime.ops import build_env

# DeepSpeed's compiled ops build into, and load from, this environment's own directory with its own ninja
# (zerogate.runtime.ops; `make setup` builds them): every job, local or on Slurm, and every rank inherits this.
os.environ.update(build_env())

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


def load_profile(name, asked_by=CONFIG_FILE, key="profile"):
    """(the resolved profile as written, with the defaults the schema fills in: what the run's hash is
    taken of; its typed settings, zerogate.config.settings.ProfileSettings: what every rule's parameters
    come from), after the schema and the settings model's checks. ``asked_by`` and ``key``: where the
    profile was named, for the error when it is not there."""
    try:
        chain = load_profile_chain(PROFILES, name, asked_by, key)
        profile = resolve_profile(chain)
    except InputError as error:
        fail(error)
    validated(profile, "profile.schema.json", chain)
    try:
        settings = check_profile(profile, chain, REPO)
    except InputError as error:
        fail(error)
    return profile, settings


validated(config, "config.schema.json")
try:
    # The run configuration, typed (zerogate.config.run_config.RunConfig): what the code below reads.
    RUN_CONFIG = run_config(config, lambda key: config_source(key.split(".")))
except InputError as error:
    fail(error)
# The profile as given (a name in config/profiles/, or a .yaml path) and the name its results are filed under.
PROFILE_ARG = RUN_CONFIG.profile
PROFILE_NAME = profile_name(PROFILE_ARG)
PROFILE, SETTINGS = load_profile(PROFILE_ARG)
# "auto" (the host name) and "today" (the report's date) are resolved once, by the invocation the user
# started, and reach every job it spawns through the environment: a cluster job re-reads this file on its
# own node, perhaps after midnight, and must build the same paths (sbatch passes the environment on).
MACHINE = (
    os.environ.setdefault("ZEROGATE_MACHINE", machine_id_from_host(socket.gethostname()))
    if RUN_CONFIG.machine == "auto"
    else RUN_CONFIG.machine
)
# A described machine (config/machines/<name>.yaml) is planned for, never probed; "auto" takes its file name.
# It is checked whole here (zerogate.config.machines.described_machine), so a bad one stops a dry run too.
MACHINE_DESCRIPTION = RUN_CONFIG.machine_description
DESCRIBED_MACHINE = None
if MACHINE_DESCRIPTION:
    try:
        DESCRIBED_MACHINE = described_machine(
            MACHINE_DESCRIPTION, config_source(["machine_description"]), REPO
        )
    except InputError as error:
        fail(error)
    if RUN_CONFIG.machine == "auto":
        MACHINE = Path(MACHINE_DESCRIPTION).stem
CONFIG_HASH = sha256_json({"profile": PROFILE, "pipeline_version": PIPELINE_VERSION})
# A run is this pipeline version, this resolved profile, on this machine.
RUN_ID = f"{PROFILE_NAME}-{MACHINE}-{CONFIG_HASH[:8]}"
# Output paths are fixed when the DAG is built, so the report's date is that moment's UTC date: a report
# built on another day gets a new file beside the old one (the inputs are unchanged, so only the report
# and the registry are rebuilt).
REPORT_DATE = (
    os.environ.setdefault(
        "ZEROGATE_REPORT_DATE", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    )
    if RUN_CONFIG.report_date == "today"
    else RUN_CONFIG.report_date
)
STRICT = RUN_CONFIG.strict
# Which optimizer steps the timing statistics leave out: an analysis setting, a param of the judging rules
# only, so editing it re-judges and never retrains.
WARMUP_STEPS = SETTINGS.training.warmup_steps_excluded
# The timing statistics' intervals (profile key `intervals`): an analysis setting too.
INTERVALS = plain(SETTINGS.intervals)
# Profile key `repeats`: the run is trained this many times. Repeat 0 is the run itself (train/, parsed/);
# repeats 1.. train under repeats/<k>/ with seed training.seed + k.
REPEATS = SETTINGS.repeats
# Profile key `variant_optimizer_steps`: what each comparison run trains (at most the run's own steps).
VARIANT_STEPS = SETTINGS.variant_steps


# The claim judged (config key `claim`: a claim file, zerogate.config.claims, docs/claims.md; default the
# seed's, config/claims/seed.yaml): on paper for its claimed box (plan_claimed_box, judge_claim_on_paper)
# and measured on the machine that ran (judge_seed_claims), by zerogate.analysis.claims. Checked whole here,
# before any job; with `claim=none` nothing of a claim is in the DAG: CLAIMS is None.
try:
    CLAIMS = load_claim(REPO, RUN_CONFIG.claim, config_source(["claim"]))
except InputError as error:
    fail(error)
CLAIM_FILE = claim_file(RUN_CONFIG.claim)
CLAIM_NAME = claim_name(CLAIM_FILE) if CLAIMS else None
CLAIMED_BOX = CLAIMS.claimed_box if CLAIMS else None
CLAIMED_PROFILE, CLAIMED_SETTINGS = (
    load_profile(CLAIMED_BOX.profile, CLAIM_FILE, "claimed_box.profile") if CLAIMS else (None, None)
)

# The neutral base of the plan_model target (plan_model.smk), read once: one line when it is malformed.
try:
    PLAN_BASE = read_base(REPO)
except InputError as error:
    fail(error)


def profile_file_setting(key):
    """The profile file that sets ``key`` (dotted), for error messages of rules that check it later."""
    chain = load_profile_chain(PROFILES, PROFILE_ARG, CONFIG_FILE, "profile")
    return str(file_defining(chain, key.split("."))).replace(f"{REPO}/", "")


def check_inputs():
    """A model path that does not exist or a GGUF transformers cannot load, a dataset file that does not
    parse or lacks a mapped column, a claim's DeepSpeed config that does not parse or has a key DeepSpeed
    would ignore (the run's and the claimed box's, which several rules read), and a global batch the
    described machine's ranks cannot make stop here: before any job runs.
    """
    try:
        check_model_source(SETTINGS.model.source, profile_file_setting("model.source"), REPO)
        dataset = SETTINGS.dataset
        check_dataset_source(dataset.source, dataset.columns, dataset.format, REPO)
        claimed = [CLAIMED_SETTINGS.deepspeed.template] if CLAIMS else []
        for template in dict.fromkeys([SETTINGS.deepspeed.template, *claimed]):
            read_claim(REPO / template, template)
        if DESCRIBED_MACHINE is not None:
            check_described_world(
                SETTINGS.training.run,
                DESCRIBED_MACHINE,
                PROFILE.get("nodes"),
                profile_file_setting("training.train_batch_size"),
            )
    except InputError as error:
        fail(error)


check_inputs()


def nodes_hostfile():
    """The profile's DeepSpeed hostfile (several nodes): an input of the rendering, so editing it re-renders."""
    hostfile = (PROFILE.get("nodes") or {}).get("hostfile")
    return [hostfile] if hostfile else []


def dataset_files():
    """A local dataset file is an input of prepare_dataset, so editing it re-runs the stage."""
    source = SETTINGS.dataset.source
    return [] if source == "builtin-tasks" or source.startswith("hub:") else [source]


# One profile and one machine per invocation: every path below is concrete (no {profile} or {machine}
# wildcards pinned to one value), built from RESULTS. Rules cite each other's outputs as rules.X.output.Y;
# result() is only for a rule's own outputs and logs. The real wildcards are {variant} and the
# benchmarks' {bench_row}, {repeat} and {point} (a point of the planner's validation grid).
RESULTS = f"results/{PROFILE_NAME}/{MACHINE}"


def result(path):
    """``path`` under this run's results directory, results/<profile>/<machine>/."""
    return f"{RESULTS}/{path}"


def claim_result(path):
    """``path`` under the judged claim's own directory, results/<profile>/<machine>/claims/<claim>/: the
    results of two claims never overwrite each other."""
    return result(f"claims/{CLAIM_NAME}/{path}")


def claim_outputs(named):
    """Outputs of the claim's rules as named inputs (``named()``: input name -> a rule's output), for a rule
    that reads them only when a claim is judged: none with claim=none (the claim's rules are not defined
    then, so ``named`` is called only when they are)."""

    def inputs(wildcards):
        return named() if CLAIMS else {}

    return inputs


# The benchmarks (bench.smk) train two variants whatever the profile lists.
BENCH_VARIANTS = ["zero0", "zero2-offload"]
# The benchmarks' training runs besides DDP (bench_ds_config, bench_extra): zero3 as rendered, the same
# without the CPU tuning, the same with the metrics layer off, and the two variants.
BENCH_ROWS = ["zero3", "zero3-untuned", "zero3-no-metrics", *BENCH_VARIANTS]
BENCH_REPEATS = list(range(RUN_CONFIG.bench_repeats))
# The peers' benchmark (bench_peers_vs_zero3) trains these variants whatever the profile lists.
PEER_BENCH_VARIANTS = list(PEERS_BENCHMARK)


wildcard_constraints:
    variant="|".join(
        re.escape(v)
        for v in dict.fromkeys([*PROFILE.get("variants", []), *BENCH_VARIANTS, *PEER_BENCH_VARIANTS])
    ),
    bench_row="|".join(re.escape(r) for r in BENCH_ROWS),
    repeat=r"\d+",
    point=r"[a-z0-9][a-z0-9-]*",


def host_cores():
    """Cores this process may use: the training ranks' thread pools share them
    (zerogate.render.world.thread_env) and the probe measures its host peaks on all of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def host_share_pool():
    """All of the host_share resource. A measuring job (the probe, every training run) holds all of it, so no
    other job of this invocation runs beside it; every other job holds one share (the workflow profile,
    profiles/default, declares the pool and that default). Without the profile the resource is unlimited
    and only the cores keep jobs apart."""
    pool = workflow.global_resources.get("host_share")
    return int(getattr(pool, "value", pool) or 1)


HOST_SHARE_POOL = host_share_pool()


# What the report and the strict-mode stamp are named after: the pipeline version, the run id (profile,
# machine, config hash) and the UTC date the DAG was built.
RUN_LABEL = f"v{PIPELINE_VERSION}-{RUN_ID}-{REPORT_DATE}"


def plan_targets():
    """What the plan target prints: the plan, and the claim judged on paper when one is named."""
    judged = [rules.judge_claim_on_paper.output.summary] if CLAIMS else []
    return [rules.judge_plan_claims.output.summary, *judged]


def final_targets():
    if MACHINE_DESCRIPTION:  # a described machine is planned for, never trained on
        return plan_targets()
    targets = [
        rules.check_gates.output.verdicts,
        rules.write_report.output.html,
        rules.register_run.output.registry,
        *plan_targets(),
        rules.compare_ledger.output.table,
    ]
    if CLAIMS:
        targets.append(rules.judge_seed_claims.output.verdicts)
    if STRICT:
        targets.append(rules.enforce_gates.output.passed)
    return targets


def compare_registries():
    """The run registries the compare target reads: the run directories of the config's compare, or every
    results/*/*/registry.json present now."""
    if RUN_CONFIG.compare:
        return [d if d.endswith(".json") else str(Path(d) / "registry.json") for d in RUN_CONFIG.compare]
    return sorted(str(p) for p in Path("results").glob("*/*/registry.json"))


def compare_inputs(wildcards):
    """The compare rule's registries (only evaluated when the compare target is asked for): stops with
    one line when a listed run has none, or when fewer than two runs are found."""
    registries = compare_registries()
    missing = [r for r in registries if not Path(r).exists()]
    if missing:
        fail(f"{config_source(['compare'])}: compare: no run registry at {', '.join(missing)}")
    if len(registries) < 2:
        fail(
            f"{config_source(['compare'])}: compare: {len(registries)} run(s) found, need two "
            "(list run directories under compare, or run the pipeline for another profile or machine)"
        )
    return {
        "registries": [ancient(r) for r in registries],
        "summaries": [ancient(run_summary_beside(r)) for r in registries],
    }


def run_summary_beside(registry):
    """The run summary (summarise_run's summary/run.json) beside a run's registry: what compare reads the
    bootstrap replicates of. This run's is made by summarise_run; another run's must be there already."""
    summary = str(Path(registry).parent / "summary" / "run.json")
    if summary != rules.summarise_run.output.summary and not Path(summary).exists():
        fail(
            f"{config_source(['compare'])}: compare: no run summary at {summary} (make it: snakemake "
            f"--cores all --config profile=<its profile> machine=<its machine> -- {summary})"
        )
    return summary


def _compare_id():
    """Names the comparison after the runs it holds, so comparisons of other sets never overwrite it."""
    return sha256_json(compare_registries())[:8]


COMPARE_ID = _compare_id()


def machine_input(wildcards):
    """The machine the config is rendered and the run planned for: the described one when given
    (config/machines/<name>.yaml, never probed), else this machine's probe."""
    if MACHINE_DESCRIPTION:
        return {"description": MACHINE_DESCRIPTION}
    return {"fingerprint": rules.probe_hardware.output.fingerprint}


def checkpoint_dir(wildcards):
    """Checkpoints of a training run: beside its outputs, never one of them (they must outlive a crash)."""
    variant = getattr(wildcards, "variant", None)
    if variant:
        return result(f"variants/{variant}/checkpoints")
    if hasattr(wildcards, "bench_row"):
        return result(f"bench/runs/{wildcards.bench_row}/{wildcards.repeat}/checkpoints")
    if hasattr(wildcards, "repeat"):
        return result(f"repeats/{wildcards.repeat}/checkpoints")
    return result("checkpoints")


def repeat_outputs(name):
    """One output of every other repeat's parse (profile key `repeats`), repeat 1 first; empty for one run."""

    def outputs(wildcards):
        return expand(getattr(rules.parse_repeat_logs.output, name), repeat=range(1, REPEATS))

    return outputs


def variant_summaries(wildcards):
    """Every comparison run the profile lists (key `variants`) that this pipeline trains."""
    return expand(rules.train_variant.output.summary, variant=trained(PROFILE.get("variants", [])))


def variant_run_summaries(wildcards):
    """The run summary of every comparison run (summarise_variant), in the order of variant_summaries."""
    return expand(rules.summarise_variant.output.summary, variant=trained(PROFILE.get("variants", [])))


def variant_metrics(wildcards):
    """The per-rank records of every comparison run, in the order of variant_summaries."""
    return expand(rules.train_variant.output.metrics, variant=trained(PROFILE.get("variants", [])))


def predicted_variants():
    """The listed variants the planner predicts a peak for: every trained one (DeepSpeed's and FSDP2's)."""
    return [v for v in trained(PROFILE.get("variants", [])) if engine_of(v) in ("deepspeed", "fsdp2")]


def variant_peaks(wildcards):
    """The predicted peak of every variant of predicted_variants, in its order."""
    return expand(rules.predict_variant_peak_memory.output.peak, variant=predicted_variants())


def variants_inputs(name):
    """The variants' table or their loss figure, for the report's choices section: only when the profile
    lists variants (empty otherwise)."""

    def inputs(wildcards):
        if not PROFILE.get("variants"):
            return []
        return [
            rules.compare_variants.output.table if name == "table" else rules.plot_variant_losses.output.loss
        ]

    return inputs


def variant_engine_argument(wildcards):
    """The training loop's engine for a variant: DeepSpeed's (the default) or a peer's (zerogate.render.variants)."""
    engine = engine_of(wildcards.variant)
    return "" if engine == "deepspeed" else f"--engine {engine}"


def bench_ds_config(wildcards):
    """The DeepSpeed config of a benchmark row: as rendered, without the CPU tuning, or a variant's."""
    if wildcards.bench_row in BENCH_VARIANTS:
        return expand(rules.render_variant_config.output.ds_config, variant=wildcards.bench_row)
    if wildcards.bench_row == "zero3-untuned":
        return rules.render_untuned_config.output.ds_config
    return rules.render_deepspeed_config.output.ds_config


def bench_extra(wildcards):
    """Extra arguments of a benchmark row's training loop: the metrics layer off for zero3-no-metrics."""
    return "--no-metrics" if wildcards.bench_row == "zero3-no-metrics" else ""


# The validate_planner target (workflow/rules/validate_planner.smk): the table of published setups it
# judges the planner against, where its results go, and what computes the figures.
PUBLISHED_SETUPS = RUN_CONFIG.published_setups
PLANNER_VALIDATION = f"results/planner_validation/{Path(PUBLISHED_SETUPS).stem}"
# What the figures are computed by (what validate_planner imports): a change to any of these is a new planner
# to judge.
PLANNER_SOURCES = sorted(
    str(path.relative_to(REPO))
    for folder in ("predict", "render", "model", "config", "contracts")
    for path in (REPO / "workflow" / "zerogate" / folder).glob("*.py")
) + [
    "workflow/zerogate/bench/planner_validation.py",
    "workflow/zerogate/bench/printed_rows.py",
    "workflow/zerogate/bench/measured_rows.py",
    "workflow/zerogate/analysis/planner_validation.py",
    "workflow/zerogate/bench/step_time_predict.py",
    "workflow/zerogate/bench/step_time_judged.py",
    "workflow/zerogate/bench/step_time_rows.py",
    "workflow/zerogate/analysis/step_time_validation.py",
    "workflow/zerogate/runtime/nodes.py",
    "workflow/zerogate/runtime/collectives.py",
    "workflow/zerogate/runtime/heap.py",
    "workflow/zerogate/runtime/live_tensors.py",
    "workflow/zerogate/hardware.py",
    "workflow/zerogate/units.py",
    "config/cards.yaml",
    "config/host_cpus.yaml",
]


def planner_grid_if_run(wildcards):
    """bench_planner_grid's table where it was run for this profile (validate_planner reads it, never runs it:
    the grid trains); nothing otherwise."""
    grid = result("bench/planner_grid.json")
    return [grid] if (REPO / grid).is_file() else []


def published_setups_table(wildcards):
    """The table to judge, checked whole (zerogate.config.published_setups.read_setups): one line before any
    job when it is not there or a row is malformed. What needs the planner (a row's model config) is checked
    by the rule, still before any row is planned."""
    if not (REPO / PUBLISHED_SETUPS).is_file():
        fail(
            InputError(
                config_source(["published_setups"]), "published_setups", f"no such file: {PUBLISHED_SETUPS}"
            )
        )
    try:
        read_setups(REPO / PUBLISHED_SETUPS, PUBLISHED_SETUPS)
    except InputError as error:
        fail(error)
    return PUBLISHED_SETUPS


# The planner's validation grid (bench_planner_grid in bench.smk): short training runs, each a profile that
# extends the grid's base (zerogate.bench.grid_points). The file's structure is checked when the workflow
# loads (one line naming the file, the point and the key); each point's whole profile, model config
# included, by write_grid_profiles, before any point trains.
PLANNER_GRID = RUN_CONFIG.planner_grid
PLANNER_GRID_DIR = result("bench/planner_grid")


def planner_grid_points():
    """The grid's point ids, in the file's order; none when the file is not there (the target says so)."""
    if not (REPO / PLANNER_GRID).is_file():
        return []
    try:
        return point_ids(REPO / PLANNER_GRID, PLANNER_GRID)
    except InputError as error:
        fail(error)


GRID_POINTS = planner_grid_points()


def planner_grid_file(wildcards):
    """The grid the bench_planner_grid target runs; one line before any job when it is not there."""
    if not (REPO / PLANNER_GRID).is_file():
        fail(InputError(config_source(["planner_grid"]), "planner_grid", f"no such file: {PLANNER_GRID}"))
    return PLANNER_GRID


def grid_point_results(point):
    """Where a grid point's own pipeline run files its results: results/<its profile's name>/<machine>/."""
    return f"results/{profile_name(profile_file_name(point))}/{MACHINE}"


def planner_grid_runs(wildcards):
    """The bench_planner_grid rule's inputs: the grid file and, per point in the file's order, what its run
    copied (run_grid_point's outputs)."""
    files = {"grid": planner_grid_file(wildcards)}
    for name in ("ledger", "run_spec", "ds_config", "train_benchmark"):
        files[name] = expand(getattr(rules.run_grid_point.output, name), point=GRID_POINTS)
    return files


# The plan_model target (plan_model.smk): a model on a box, from the neutral base.
@functools.cache
def model_plan_request():
    """The plan_model request of this invocation's config (zerogate.config.plan_request); one line naming
    the argument when one is bad."""
    try:
        return plan_request(config, REPO)
    except InputError as error:
        fail(error)


def model_plan_dir(wildcards=None):
    return f"results/plans/{model_plan_request().key}"


def model_plan_inputs(wildcards):
    """The files the plan reads: the model's config.json, the box's description (a short form has none),
    the neutral base and its DeepSpeed template, and the planner's modules (PLANNER_SOURCES: a changed
    planner plans again rather than printing the last answer)."""
    request = model_plan_request()
    files = {
        "model": request.model_config,
        "base": PLAN_BASE_FILE,
        "template": PLAN_BASE.deepspeed_template,
        "planner": PLANNER_SOURCES,
    }
    if request.box_file:
        files["box"] = request.box_file
    return files
