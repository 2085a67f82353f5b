"""The run configuration (config/config.yaml and ``--config`` overrides), typed: which profile, which machine,
and the targets' own settings. config/schemas/config.schema.json is generated from :class:`RunConfig`;
every default is filled into Snakemake's ``config`` when the workflow validates it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from zerogate.config.base import Bool, Int, Settings, Str, Where, setting
from zerogate.config.validation import build

NonEmpty = Annotated[Str, Field(min_length=1)]


class RunConfig(Settings):
    """zerogate run configuration (config/config.yaml and --config overrides)"""

    profile: Str = setting(
        "name of a profile file in config/profiles/ (without .yaml), or the path of a profile file ending in "
        ".yaml (relative to the repository; the planner writes its suggestions as such files), whose name "
        "without .yaml names its results directory",
        pattern=r"^[A-Za-z0-9/][A-Za-z0-9_./-]*$",
    )
    machine: Str = setting(
        'machine id used in result paths; "auto" takes the host name', pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
    )
    strict: Bool = setting(
        "exit non-zero when any gate FAILs (the verdicts and the report are still written)",
        False,
        filled=True,
    )
    report_date: Str = setting(
        'UTC date in the report\'s file name; "today" = the date the DAG is built. Set it to rebuild an '
        "earlier day's report under its own name.",
        "today",
        filled=True,
        pattern=r"^(today|[0-9]{4}-[0-9]{2}-[0-9]{2})$",
    )
    compare: list[Str] = setting(
        "run directories (results/<profile>/<machine>, or copies elsewhere) holding registry.json, for the "
        "compare target; empty = every results/*/*/registry.json",
        [],
        filled=True,
    )
    compare_reference: Str = setting(
        "machine id the compare target divides by: each group's run on that machine is the reference of its "
        "ratios; empty, or a machine not in the group: the group's first machine",
        "",
        filled=True,
    )
    machine_description: Str | None = setting(
        "optional: plan for a machine described in config/machines/<name>.yaml instead of this one "
        "(`snakemake plan --config machine_description=...`); only the plan target can be built for it",
        None,
    )
    claim: Str = setting(
        "the claim judged: a name in config/claims/ (without .yaml) or the path of a claim file ending in "
        ".yaml (docs/claims.md), whose file name without .yaml names its results (claims/<name>/); none: no "
        "claim is judged (the plan and the run only: no claimed box planned, no gate judged on paper)",
        "seed",
        filled=True,
        pattern=r"^[A-Za-z0-9/][A-Za-z0-9_./-]*$",
    )
    bench_repeats: Int = setting(
        "runs per row of the benchmarks (`make bench`); each row's figure is the median over them",
        2,
        filled=True,
        ge=1,
    )
    bench_gloo_iterations: Int = setting(
        "calls per collective and message size timed by the bench_gloo_latency benchmark",
        500,
        filled=True,
        ge=1,
    )
    log: NonEmpty | Annotated[list[NonEmpty], Field(min_length=1)] | None = setting(
        "launcher log(s) for the judge_log target (`snakemake --cores 1 judge_log --config log=PATH`, "
        "several: log=[A,B]): each judged on its own against the profile's gates, results in "
        "results/logs/<name>/",
        None,
        filled=True,
        null=True,
    )
    published_setups: Str = setting(
        "the table of published setups the validate_planner target judges the planner against (`snakemake "
        "--cores 1 validate_planner`; another table: --config published_setups=PATH, same schema, "
        "config/published_setups/README.md); results in results/planner_validation/<its file stem>/",
        "config/published_setups/setups.yaml",
        filled=True,
        min_length=1,
    )
    planner_grid: Str = setting(
        "the planner's validation grid the bench_planner_grid target trains and compares (`make "
        "bench-planner-grid`; another grid: --config planner_grid=PATH, same format as "
        "config/planner_grid.yaml)",
        "config/planner_grid.yaml",
        filled=True,
        min_length=1,
    )

    # The plan_model target (`make plan`): a model and a box, planned from the neutral base
    # config/plan_base.yaml (zerogate.config.plan_request reads these keys; docs/planning.md).
    model: Str | None = setting(
        "plan_model: the model, as a config.json, a directory holding one, or a shipped name "
        "(config/models/<name>.json)",
        None,
        min_length=1,
    )
    box: Str | None = setting(
        "plan_model: the box, as a machine description (config/machines/<name>.yaml) or a short form such as "
        "2xRTX3090",
        None,
        min_length=1,
    )
    host_ram: Str | Int | None = setting(
        "plan_model: the box's host RAM (128GiB, 512GB or bytes): a short form's, or in place of a "
        "description's",
        None,
    )
    host_cpu: Str | None = setting(
        "plan_model: the host's CPUs, as the host CPU catalogue (config/host_cpus.yaml) names them, with the "
        "sockets first (2x AMD EPYC 7742): their memory bandwidth in place of the box's",
        None,
        min_length=1,
    )
    zero: Int = setting("plan_model: the ZeRO stage (0: DDP)", 3, filled=True, ge=0, le=3)
    offload: Literal["none", "optimizer", "cpu", "nvme-optimizer", "nvme"] = setting(
        "plan_model: none; optimizer (optimizer state to CPU); cpu (optimizer state and parameters to CPU); "
        "nvme-optimizer (optimizer state to NVMe); nvme (both to NVMe). Parameter and NVMe offload need "
        "zero=3",
        "cpu",
        filled=True,
    )
    micro_batch: Int = setting("plan_model: rows per micro-step per rank", 1, filled=True, ge=1)
    accumulation: Int = setting("plan_model: micro-steps per optimizer step", 1, filled=True, ge=1)
    seq_len: Int = setting("plan_model: tokens per row", 512, filled=True, ge=1)
    checkpointing: Bool = setting("plan_model: activation checkpointing", False, filled=True)
    attention: Literal["auto", "sdpa", "eager"] = setting(
        "plan_model: the attention implementation; auto: sdpa where the model's transformers class supports "
        "it, else eager",
        "auto",
        filled=True,
    )


def run_config(config: dict[str, Any], where: Where) -> RunConfig:
    """Snakemake's ``config`` (validated, its defaults filled) as :class:`RunConfig`; InputError naming
    where the key was given (``where``: the command line or the config file)."""
    return build(RunConfig, config, where)
