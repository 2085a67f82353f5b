"""The planner against setups other people published (`snakemake --cores 1 validate_planner`).

Every row of config/published_setups/setups.yaml is turned into what zerogate would compute for it, by
the functions the pipeline itself uses, and judged by zerogate.analysis.planner_validation:

- ``estimator_table`` rows: the planner's DeepSpeed column (zerogate.predict.ledger.deepspeed_estimates,
  which calls DeepSpeed's estimators) on the row's parameter counts; where the row was printed with an
  option that column does not take (``zero_init=0``, another buffer factor), DeepSpeed's estimator
  itself with the row's options. Counts printed rounded give the prediction as an interval.
- ``paper_figure`` rows: the planner's paper column (zerogate.predict.ledger.paper_ledger).
- ``measured`` rows: the run the row describes (model config, ZeRO stage, offloads, precision, micro-batch,
  sequence length, accumulation, GPUs and their memory, host RAM), rendered and planned exactly as a
  profile is for a described machine (zerogate.render.ds_config.render, then the model, setup and traced
  activations of zerogate.predict.planner.run_setup and the memory checks of zerogate.predict.planner.checks,
  which plan_for_run calls for a plan's fit): the fit on the memory the source names, the largest
  micro-batch that plans to fit (the same checks at other micro-batches), and the predicted peak
  (zerogate.predict.planner.peak_prediction) beside a published reading.

What a row states that the planner's settings cannot say (an attention implementation or optimizer the
settings do not take) is listed with the row and not told to the planner. Nothing here re-computes a
planner figure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import inspect
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from zerogate import __version__
from zerogate.analysis.planner_validation import (
    ESTIMATOR_ROUNDING,
    LARGEST_WITHIN,
    PAPER_ROUNDING,
    VERDICT_AGREES,
    Spread,
    judge_largest_micro_batch,
    judge_outcome,
    judge_printed,
    missed,
    not_judged,
    printed_by_another_formula,
    reported_peak,
    summarise,
)
from zerogate.config.launch import PlanSettings
from zerogate.config.model_data import ATTENTIONS, model_settings
from zerogate.config.published_setups import (
    CUDA_LEVEL_OF_METRIC,
    UNNAMED_METRIC,
    EstimatorRow,
    MeasuredRow,
    PaperRow,
    PublishedSetups,
    level_of_metric,
    read_setups,
)
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.plan import Plan
from zerogate.contracts.planner_validation import FigureCheck, PlannerValidation, RowCheck
from zerogate.contracts.records import GitState
from zerogate.errors import InputError
from zerogate.units import format_bytes

SETUPS_FILE = "config/published_setups/setups.yaml"
PACKAGES = ("deepspeed", "torch", "transformers")
# The most micro-batches per GPU the search for the largest fitting one tries.
MICRO_BATCH_LIMIT = 4096
# A described machine needs a host RAM figure; where the source states none, this one stands in and the
# host check is not judged (it is never the check a verdict or a largest micro-batch is read from).
UNSTATED_HOST_RAM = 2**60
# The planner's scheme names (zerogate.predict.ledger.SCHEMES) of a row's ZeRO stage and offloads.
PAPER_SCHEMES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}


def scheme_of(stage: int, offload_optimizer: bool, offload_param: bool) -> str:
    if stage < 2:
        return PAPER_SCHEMES[stage]
    if stage == 2:
        return "zero2_offload_optimizer" if offload_optimizer else "zero2"
    if offload_param:
        return "zero3_offload_all"
    return "zero3_offload_optimizer" if offload_optimizer else "zero3"


def row_name(index: int, row: Any) -> str:
    return f"setups[{index}] ({row.id})"


# --- the table, checked whole before anything is planned ---------------------------------------------------


def load_table(repo: Path, file: str = SETUPS_FILE) -> tuple[PublishedSetups, dict[str, Any]]:
    """The table and each measured row's model config (transformers' config, read offline). A malformed
    row or a config that does not load stops here, with one line naming the table, the row and the key."""
    from zerogate.model.hf_config import load_config

    table = read_setups(repo / file, file)
    configs = {}
    for index, row in enumerate(table.setups):
        if isinstance(row, MeasuredRow):
            try:
                configs[row.id] = load_config(repo / row.model.config)
            except InputError as error:
                raise InputError(file, f"{row_name(index, row)}: model.config", str(error)) from None
    return table, configs


# --- estimator and paper rows ------------------------------------------------------------------------------


def _count_bounds(
    value: float | None, resolution: float | None, rounding: str | None
) -> tuple[int, int, int]:
    """(lowest, stated, highest) count a printed count stands for."""
    if value is None:
        return 0, 0, 0
    stated = int(value)
    if resolution is None:
        return stated, stated, stated
    if rounding == "truncated":  # int(x / 1e6) "M": the count is at least the printed one, less than one more
        return stated, stated, int(value + resolution) - 1
    half = resolution / 2
    return int(value - half), stated, int(value + half)


def _estimator_defaults() -> tuple[float, bool]:
    """The buffer factor and zero_init the planner's DeepSpeed column uses: DeepSpeed's own default factor
    (the column passes none) and zero_init=True (zerogate builds models under zero.Init)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    return inspect.signature(estimate_zero3_model_states_mem_needs).parameters[
        "additional_buffer_factor"
    ].default, True


def estimator_figures(row: EstimatorRow, total: int, largest: int) -> tuple[dict[str, int], str]:
    """(per-GPU and per-CPU bytes, what computed them) for ``row``'s options at these counts."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    from zerogate.model.counts import ModelCounts
    from zerogate.predict.ledger import deepspeed_estimates

    setup = row.setup
    offload_optimizer, offload_param = setup.offload_optimizer == "cpu", setup.offload_param == "cpu"
    factor, zero_init = _estimator_defaults()
    if setup.estimator_buffer_factor == factor and (
        setup.zero_stage == 2 or setup.zero_init in (None, zero_init)
    ):
        # The counts are all the column reads; the shape fields are the ledger's, unused by it.
        counts = ModelCounts(
            total=total,
            largest_layer=largest,
            numels=(total,),
            hidden=0,
            layers=0,
            heads=0,
            vocab=0,
            tied_embeddings=False,
        )
        column = deepspeed_estimates(counts, setup.gpus_per_node, setup.nodes)[
            scheme_of(setup.zero_stage, offload_optimizer, offload_param)
        ]
        assert column is not None
        return {"gpu": column["device"], "cpu": column["host"]}, "the planner's DeepSpeed column"
    if setup.zero_stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total,
            setup.gpus_per_node,
            setup.nodes,
            cpu_offload=offload_optimizer,
            additional_buffer_factor=setup.estimator_buffer_factor,
        )
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            total,
            largest,
            setup.gpus_per_node,
            setup.nodes,
            cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param,
            zero_init=bool(setup.zero_init),
            additional_buffer_factor=setup.estimator_buffer_factor,
        )
    options = f"zero_init={int(bool(setup.zero_init))}, buffer factor {setup.estimator_buffer_factor:g}"
    return {
        "gpu": int(gpu),
        "cpu": int(cpu),
    }, f"DeepSpeed's estimator with {options}, options the planner's column does not take"


def check_estimator_row(row: EstimatorRow) -> RowCheck:
    from zerogate.predict.setup import installed_deepspeed, release

    model, published = row.model, row.published
    totals = _count_bounds(model.parameters, model.count_resolution, model.count_rounding)
    largests = _count_bounds(model.largest_layer_parameters, model.count_resolution, model.count_rounding)
    # DeepSpeed's estimates grow with both counts: the lowest counts give the lowest figures.
    at = [estimator_figures(row, total, largest) for total, largest in zip(totals, largests)]
    predicted_by = at[1][1]
    installed = metadata.version("deepspeed")
    changes = {
        change.figure: change
        for change in row.changed_since_printed
        if installed_deepspeed() >= release(change.deepspeed_version)
    }
    checks = []
    for key, figure, quantity, value in (
        ("gpu", "per_gpu", "per-GPU memory", published.per_gpu_bytes),
        ("cpu", "per_cpu", "per-CPU memory", published.per_cpu_bytes),
    ):
        if value is None:
            continue
        spread = Spread(at[0][0][key], at[1][0][key], at[2][0][key])
        check = judge_printed(
            quantity,
            ESTIMATOR_ROUNDING,
            value,
            published.unit_as_printed,
            published.unit_bytes,
            published.printed_resolution,
            published.printed_rounding,
            spread,
            predicted_by,
        )
        if figure in changes:
            change = changes[figure]
            check = printed_by_another_formula(
                check, installed, change.deepspeed_version, change.change, change.formulas
            )
        checks.append(check)
    return RowCheck(
        id=row.id,
        kind=row.kind,
        source=row.source.url,
        where=row.source.where,
        checks=checks,
        not_expressed=[],
    )


def check_paper_row(row: PaperRow) -> RowCheck:
    from zerogate.predict.ledger import paper_ledger

    ranks = row.setup.gpus_per_node * row.setup.nodes
    figure = paper_ledger(int(row.model.parameters), ranks)[PAPER_SCHEMES[row.setup.zero_stage]]
    published = row.published
    assert figure is not None
    check = judge_printed(
        "per-GPU model states",
        PAPER_ROUNDING,
        published.per_gpu_bytes,
        published.unit_as_printed,
        published.unit_bytes,
        published.printed_resolution,
        published.printed_rounding,
        Spread.exact(figure),
        "the planner's paper column",
    )
    return RowCheck(
        id=row.id,
        kind=row.kind,
        source=row.source.url,
        where=row.source.where,
        checks=[check],
        not_expressed=[],
    )


# --- measured rows: the run as a profile for a described machine --------------------------------------------

REQUIRED_FACTS = ("dtype", "micro_batch_per_gpu", "seq_len", "gradient_accumulation_steps")


def model_section(row: MeasuredRow, repo: Path) -> tuple[dict[str, Any], list[str]]:
    """The profile ``model`` section of the row's model (its config file), and what of the row it cannot say:
    an attention implementation ``model.attention`` does not take."""
    section: dict[str, Any] = {"config": str(repo / row.model.config)}
    notes: list[str] = []
    attention = row.setup.attention
    if attention in ATTENTIONS:
        section["attention"] = attention
    elif attention not in (None, "unknown"):
        notes.append(
            f"attention {attention} (model.attention takes {', '.join(ATTENTIONS)}: its default is planned)"
        )
    return section, notes


def training_section(row: MeasuredRow, micro_batch: int) -> tuple[dict[str, Any], list[str]]:
    """The run's ``training`` settings: its geometry, its optimizer, its loss's precision and activation
    checkpointing as the row states them; one optimizer step (the plan does not depend on the count)."""
    setup, notes = row.setup, []
    optimizer = OPTIMIZERS.get((setup.optimizer or "").lower())
    if optimizer is None:
        stated = f"optimizer {setup.optimizer}" if setup.optimizer else "optimizer not stated"
        notes.append(
            f"{stated} (the planner's settings take {', '.join(OPTIMIZERS.values())}: AdamW is planned)"
        )
        optimizer = "AdamW"
    section: dict[str, Any] = {
        "optimizer_steps": 1,
        "micro_batch_per_rank": micro_batch,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "cpu_ranks": 1,
        "seed": 0,
        "optimizer": {"type": optimizer, "lr": 1e-5},
        "lr_warmup_steps": 1,
        "gradient_clipping": 1.0,
    }
    if setup.loss_upcast is not None:
        section["loss_in_fp32"] = setup.loss_upcast
    if setup.activation_checkpointing is not None:
        section["activation_checkpointing"] = setup.activation_checkpointing
    return section, notes


def claim_config(row: MeasuredRow) -> dict[str, Any]:
    """The row's DeepSpeed config as a claim template: stage, offloads and precision as stated, everything
    the other zero_optimization keys the row states, everything else DeepSpeed's defaults; render() sets the
    geometry."""
    setup = row.setup
    zero: dict[str, Any] = {"stage": setup.zero_stage, **setup.zero_optimization}
    for key, device in (
        ("offload_optimizer", setup.offload_optimizer),
        ("offload_param", setup.offload_param),
    ):
        if device != "none":
            zero[key] = {"device": device, **({"nvme_path": "/local_nvme"} if device == "nvme" else {})}
    return {
        "zero_optimization": zero,
        "fp16": {"enabled": setup.dtype == "fp16"},
        "bf16": {"enabled": setup.dtype == "bf16"},
    }


def described_machine(row: MeasuredRow) -> dict[str, Any]:
    """The row's hardware as a machine description (config/schemas/machine.schema.yaml): one node's GPUs,
    each supporting the row's precision (the published run used it), and the host RAM as stated."""
    from zerogate.config.machines import check

    gpu = {
        "name": row.hardware.gpu,
        "memory_total_bytes": row.hardware.gpu_memory_bytes,
        "fp16_supported": True,
        "bf16_supported": True,
    }
    machine = {
        "name": row.id,
        "source": "described",
        "description": f"{row.id}: as published ({row.source.url})",
        "nodes": row.setup.nodes,
        "gpus": [dict(gpu) for _ in range(row.setup.gpus_per_node)],
        "host": {"ram_total_bytes": row.hardware.host_ram_bytes or UNSTATED_HOST_RAM},
    }
    return check(machine, f"{SETUPS_FILE} ({row.id})")


def node_layout(row: MeasuredRow) -> Any:
    """Several nodes as render() lays them out for a profile's nodes section; None for one node."""
    from zerogate.runtime.nodes import NodeLayout

    if row.setup.nodes == 1:
        return None
    return NodeLayout(
        hosts=tuple(f"node{i}" for i in range(row.setup.nodes)),
        ranks_per_node=row.setup.gpus_per_node,
        mode="no_ssh",
    )


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """A row's run as the pipeline plans it: the memory checks its verdict reads, and the whole plan on demand
    (its largest micro-batch, suggestions and ledger trace the run at many other shapes, which no verdict of
    the table reads)."""

    run_spec: Any
    ds_config: Any
    machine: dict[str, Any]
    checks: list[Any]  # zerogate.predict.planner.checks: one per rank's device, one for the host
    not_expressed: tuple[str, ...]
    planned: tuple[Any, Any, Any]  # (counts, setup, activations) of zerogate.predict.planner.run_setup
    profile: str

    @functools.cached_property
    def plan(self) -> Plan:
        """The whole plan, as plan_for_run writes it for a profile (the same checks, so the same fit)."""
        from zerogate.predict.planner import plan

        counts, setup, activations = self.planned
        return plan(
            counts, setup, self.machine, PlanSettings(), profile=self.profile, activations=activations
        )

    @property
    def scheme(self) -> str:
        return self.planned[1].scheme

    @property
    def ranks(self) -> int:
        return self.planned[1].ranks

    @property
    def dtype(self) -> str:
        return self.planned[1].dtype


def plan_measured(row: MeasuredRow, config: Any, repo: Path, micro_batch: int | None = None) -> PlannedRun:
    """The row's run rendered and planned for its hardware, at ``micro_batch`` (default: the row's)."""
    from zerogate.config.machines import to_fingerprint
    from zerogate.config.profile import model_with_config
    from zerogate.contracts.run import DsConfig
    from zerogate.model.hf_config import shape_of
    from zerogate.predict.planner import checks, run_setup
    from zerogate.predict.setup import release
    from zerogate.render.ds_config import RenderInputs, render

    micro_batch = micro_batch or row.setup.micro_batch_per_gpu
    assert micro_batch is not None
    where = f"{SETUPS_FILE} ({row.id})"
    model, model_notes = model_section(row, repo)
    training, training_notes = training_section(row, micro_batch)
    machine = described_machine(row)
    settings, _ = model_with_config(model_settings(model, lambda key: where), lambda key: where)
    ds_config, _, run_spec = render(
        claim_config(row),
        RenderInputs(
            model=settings,
            training=typed(RunTraining, training, where),
            overrides=[],
            seq_len=row.setup.seq_len,
            vocab_size=shape_of(config).vocab_size,
            fingerprint=to_fingerprint(machine),
            template_file=where,
            profile_file=where,
            nodes=node_layout(row),
        ),
    )
    typed_config = DsConfig.of(ds_config, where)
    # One row is planned at many micro-batches (largest_micro_batch): its plans share their traces.
    counts, setup, activations = run_setup(run_spec, typed_config, machine, share_traces=True)
    if row.setup.deepspeed_version is not None:
        setup = dataclasses.replace(setup, deepspeed_version=release(row.setup.deepspeed_version))
    return PlannedRun(
        run_spec,
        typed_config,
        machine,
        checks(counts, setup, machine, activations),
        tuple(model_notes + training_notes),
        (counts, setup, activations),
        row.id,
    )


def _judged_fits(run: PlannedRun, memory: str, host_stated: bool) -> tuple[bool, str]:
    """Whether the run plans to fit on ``memory`` ("device", "host" or "both": the device and, where the
    source states it, the host), and the tightest check judged, in words."""
    device, host = [c for c in run.checks if c.rank is not None], [c for c in run.checks if c.rank is None]
    judged = {"device": device, "host": host, "both": device + (host if host_stated else [])}[memory]
    tightest = min(judged, key=lambda c: c.headroom_bytes)
    rank = f"rank {tightest.rank} {tightest.device}" if tightest.rank is not None else "host"
    return all(c.fits for c in judged), (
        f"{rank} {tightest.what} needs {format_bytes(tightest.need_bytes)} of "
        f"{format_bytes(tightest.capacity_bytes)}"
    )


def largest_micro_batch(fits_at: Callable[[int], bool], limit: int = MICRO_BATCH_LIMIT) -> int:
    """The largest micro-batch ``fits_at`` accepts, searched as the planner searches its own
    (zerogate.predict.planner.largest_accepted)."""
    from zerogate.predict.planner import largest_accepted

    return largest_accepted(fits_at, limit)


def check_measured_row(row: MeasuredRow, config: Any, repo: Path) -> RowCheck:
    from zerogate.predict.planner import peak_prediction

    published, setup = row.published, row.setup
    memory = published.oom_memory or "both"
    shown = "fits" if published.outcome == "fits" else f"out of memory ({published.oom_memory})"
    host_stated = row.hardware.host_ram_bytes is not None
    wanted: list[tuple[str, str, str | None]] = [("fits / out of memory", shown, VERDICT_AGREES)]
    if published.largest_micro_batch is not None:
        wanted.append(("largest micro-batch per GPU", str(published.largest_micro_batch), LARGEST_WITHIN))
    if published.peak_bytes is not None:
        wanted.append(
            ("peak memory per GPU", f"{format_bytes(published.peak_bytes)} ({published.peak_metric})", None)
        )

    def row_check(checks: list[FigureCheck], notes: tuple[str, ...] | list[str] = ()) -> RowCheck:
        return RowCheck(
            id=row.id,
            kind=row.kind,
            source=row.source.url,
            where=row.source.where,
            checks=checks,
            not_expressed=list(notes),
        )

    unstated = [f"setup.{key}" for key in REQUIRED_FACTS if getattr(setup, key) is None]
    if memory == "host" and not host_stated:
        unstated.append("hardware.host_ram_bytes")
    if unstated:
        why = f"the source does not state {', '.join(unstated)}, which the plan needs"
        return row_check([not_judged(q, p, t, why) for q, p, t in wanted])
    try:
        run = plan_measured(row, config, repo)
    except InputError as error:
        why = f"the planner cannot plan this run: {error}"
        return row_check([missed(q, p, t, why) for q, p, t in wanted])

    fits, need = _judged_fits(run, memory, host_stated)
    judged_on = {
        "device": "every GPU's check",
        "host": "the host check",
        "both": "every GPU's check"
        + (" and the host check" if host_stated else " (host RAM not stated: host not judged)"),
    }[memory]
    planned_for = (
        f", DeepSpeed {setup.deepspeed_version} as the row states"
        if setup.deepspeed_version
        else ", the installed DeepSpeed"
    )
    checks = [
        judge_outcome(
            published.outcome,
            published.oom_memory,
            fits,
            need,
            f"the plan ({run.scheme}, {run.ranks} ranks, {run.dtype}{planned_for}) on {judged_on}",
        )
    ]
    if published.largest_micro_batch is not None:
        predicted = largest_micro_batch(
            lambda m: _judged_fits(plan_measured(row, config, repo, m), "both", host_stated)[0]
        )
        checks.append(
            judge_largest_micro_batch(
                published.largest_micro_batch,
                predicted,
                "the same plan at each micro-batch, accumulation as published",
            )
        )
    if published.peak_bytes is not None:
        counts, setup, activations = run.planned
        metric = published.peak_metric or UNNAMED_METRIC
        predicted = peak_prediction(counts, setup, None, activations).levels[level_of_metric(metric)]
        checks.append(
            reported_peak(
                published.peak_bytes,
                metric,
                predicted.predicted_bytes,
                predicted.what,
                same_metric=metric in CUDA_LEVEL_OF_METRIC,
            )
        )
    return row_check(checks, run.not_expressed)


# --- the whole table --------------------------------------------------------------------------------------


def _git(repo: Path) -> GitState:
    from zerogate.provenance import git_state

    return GitState(**git_state(repo))


def validate(repo: Path, file: str = SETUPS_FILE) -> PlannerValidation:
    """Every row of the table judged (the table checked whole first: a bad row plans nothing)."""
    table, configs = load_table(repo, file)
    rows = []
    for row in table.setups:
        if isinstance(row, EstimatorRow):
            rows.append(check_estimator_row(row))
        elif isinstance(row, PaperRow):
            rows.append(check_paper_row(row))
        else:
            rows.append(check_measured_row(row, configs[row.id], repo))
    return PlannerValidation(
        table=file,
        table_sha256=hashlib.sha256((repo / file).read_bytes()).hexdigest(),
        pipeline_version=__version__,
        git=_git(repo),
        packages={name: metadata.version(name) for name in PACKAGES},
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        rows=rows,
        summary=summarise(rows),
    )
