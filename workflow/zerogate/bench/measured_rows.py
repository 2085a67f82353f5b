"""The published runs someone measured, planned as zerogate plans a profile: a ``measured`` row's run (model
config, ZeRO stage, offloads, precision, micro-batch, sequence length, accumulation, GPUs and their memory,
host RAM) rendered and planned exactly as a profile is for a described machine
(zerogate.render.ds_config.render, then zerogate.predict.planned_run.run_setup and the memory checks of
zerogate.predict.fit.checks, which plan_for_run calls for a plan's fit). Judged: the fit on the memory the
source names, the largest micro-batch that plans to fit (the same checks at other micro-batches), and the
predicted peak (zerogate.predict.peak.peak_prediction) beside a published reading.

What a row states that the planner's settings cannot say (an attention implementation or optimizer the
settings do not take) is listed with the row and not told to the planner."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zerogate.analysis.planner_validation import (
    DOES_NOT_FIT,
    FITS,
    LARGEST_WITHIN,
    VERDICT_AGREES,
    Spread,
    judge_largest_micro_batch,
    judge_outcome,
    judge_reading,
    missed,
    not_judged,
    worst_verdict,
)
from zerogate.bench.printed_rows import row_check
from zerogate.config.launch import PlanSettings
from zerogate.config.machines import MachineDescription, check, to_fingerprint
from zerogate.config.model_data import ATTENTIONS, model_settings
from zerogate.config.profile import model_with_config
from zerogate.config.published_setups import (
    HOST_RSS,
    OOM_MESSAGE,
    UNPLANNED_PLATFORMS,
    MeasuredRow,
    level_of_metric,
)
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.plan import MemoryCheck, Plan
from zerogate.contracts.planner_validation import FigureCheck, RowCheck
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.errors import InputError
from zerogate.model.hf_config import shape_of
from zerogate.predict.cuda_terms import module_loading
from zerogate.predict.fit import checks, largest_accepted
from zerogate.predict.peak import peak_prediction
from zerogate.predict.phases import device_levels
from zerogate.predict.planned_run import PlannedRun, run_setup
from zerogate.predict.planner import plan
from zerogate.predict.setup import Setup, release
from zerogate.predict.zero_terms import zerogate_terms
from zerogate.render.ds_config import RenderInputs, render
from zerogate.runtime.nodes import NodeLayout
from zerogate.units import format_bytes

SETUPS_FILE = "config/published_setups/setups.yaml"
# The most micro-batches per GPU the search for the largest fitting one tries.
MICRO_BATCH_LIMIT = 4096
# A described machine needs a host RAM figure; where the source states none, this one stands in and the
# host check is not judged (it is never the check a verdict or a largest micro-batch is read from).
UNSTATED_HOST_RAM = 2**60
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}
REQUIRED_FACTS = ("dtype", "micro_batch_per_gpu", "seq_len", "gradient_accumulation_steps")
# A figure a row publishes: (quantity, as published, target or None).
Wanted = tuple[str, str, str | None]


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


def described_machine(row: MeasuredRow) -> MachineDescription:
    """The row's hardware as a machine description: one node's GPUs, each supporting the row's precision
    (the published run used it), and the host RAM as stated."""
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


def node_layout(row: MeasuredRow) -> NodeLayout | None:
    """Several nodes as render() lays them out for a profile's nodes section; None for one node."""
    if row.setup.nodes == 1:
        return None
    return NodeLayout(
        hosts=tuple(f"node{i}" for i in range(row.setup.nodes)),
        ranks_per_node=row.setup.gpus_per_node,
        mode="no_ssh",
    )


@dataclasses.dataclass(frozen=True)
class MeasuredRun:
    """A row's run as the pipeline plans it: the memory checks its verdict reads, and the whole plan on demand
    (its largest micro-batch, suggestions and ledger trace the run at many other shapes, which no verdict of
    the table reads)."""

    run_spec: RunSpec
    ds_config: DsConfig
    machine: MachineDescription
    checks: list[MemoryCheck]  # zerogate.predict.fit.checks: one per rank's device, one for the host
    not_expressed: tuple[str, ...]
    planned: PlannedRun
    profile: str

    @functools.cached_property
    def plan(self) -> Plan:
        """The whole plan, as plan_for_run writes it for a profile (the same checks, so the same fit)."""
        counts, setup, activations = self.planned
        settings = PlanSettings()
        return plan(counts, setup, self.machine, settings, profile=self.profile, activations=activations)

    @property
    def scheme(self) -> str:
        return self.planned.setup.scheme

    @property
    def ranks(self) -> int:
        return self.planned.setup.ranks

    @property
    def dtype(self) -> str:
        return self.planned.setup.dtype


def plan_measured(row: MeasuredRow, config: Any, repo: Path, micro_batch: int | None = None) -> MeasuredRun:
    """The row's run rendered and planned for its hardware, at ``micro_batch`` (default: the row's)."""
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
    planned = run_setup(run_spec, typed_config, machine.nodes)
    planned = planned._replace(setup=stated_releases(row, planned.setup))
    return MeasuredRun(
        run_spec,
        typed_config,
        machine,
        checks(planned.counts, planned.setup, machine, planned.activations),
        tuple(model_notes + training_notes),
        planned,
        row.id,
    )


def stated_releases(row: MeasuredRow, setup: Setup) -> Setup:
    """``setup`` planned for the releases the row states it ran: its DeepSpeed, its transformers (the loss's
    logits copies) and its torch build (the CUDA context's module loading); the installed ones otherwise."""
    stated = row.setup
    return dataclasses.replace(
        setup,
        deepspeed_version=release(stated.deepspeed_version) if stated.deepspeed_version else None,
        transformers_version=release(stated.transformers_version) if stated.transformers_version else None,
        cuda_module_loading=module_loading(stated.torch_version),
    )


def check_verdict(check: MemoryCheck) -> str:
    """One memory check's fit verdict (zerogate.analysis.planner_validation.FIT_VERDICTS): the plan's own
    three-valued verdict on its need's interval (zerogate.predict.fit.verdict); a check written without one
    says fits or does not fit on its point need."""
    if check.verdict is not None:
        return check.verdict
    return FITS if check.fits else DOES_NOT_FIT


def judged_fits(run: MeasuredRun, memory: str, host_stated: bool) -> tuple[str, str]:
    """The run's fit verdict on ``memory`` ("device", "host" or "both": the device and, where the source
    states it, the host): the worst of its checks', and the tightest check judged, in words."""
    device, host = [c for c in run.checks if c.rank is not None], [c for c in run.checks if c.rank is None]
    judged = {"device": device, "host": host, "both": device + (host if host_stated else [])}[memory]
    tightest = min(judged, key=lambda c: c.headroom_bytes)
    rank = f"rank {tightest.rank} {tightest.device}" if tightest.rank is not None else "host"
    return worst_verdict(check_verdict(c) for c in judged), (
        f"{rank} {tightest.what} needs {format_bytes(tightest.need_bytes)} of "
        f"{format_bytes(tightest.capacity_bytes)}"
    )


def largest_micro_batch(fits_at: Callable[[int], bool], limit: int = MICRO_BATCH_LIMIT) -> int:
    """The largest micro-batch ``fits_at`` accepts, searched as the planner searches its own
    (zerogate.predict.fit.largest_accepted)."""
    return largest_accepted(fits_at, limit)


def wanted_figures(row: MeasuredRow) -> list[Wanted]:
    """The figures the row publishes: the outcome always, the largest micro-batch and a peak reading where
    it states them."""
    published = row.published
    shown = "fits" if published.outcome == "fits" else f"out of memory ({published.oom_memory})"
    wanted: list[Wanted] = [("fits / out of memory", shown, VERDICT_AGREES)]
    if published.largest_micro_batch is not None:
        wanted.append(("largest micro-batch per GPU", str(published.largest_micro_batch), LARGEST_WITHIN))
    if published.peak_bytes is not None:
        wanted.append(
            (reading_quantity(row), f"{format_bytes(published.peak_bytes)} ({published.level})", None)
        )
    return wanted


def reading_quantity(row: MeasuredRow) -> str:
    return "host memory" if row.published.level == HOST_RSS else "peak memory per GPU"


def unstated_facts(row: MeasuredRow, memory: str, host_stated: bool) -> list[str]:
    """What the plan needs that the row does not state."""
    unstated = [f"setup.{key}" for key in REQUIRED_FACTS if getattr(row.setup, key) is None]
    if memory == "host" and not host_stated:
        unstated.append("hardware.host_ram_bytes")
    return unstated


def outcome_check(row: MeasuredRow, run: MeasuredRun, memory: str, host_stated: bool) -> FigureCheck:
    """The published outcome against the plan's fit verdict on the memory the source names."""
    verdict, need = judged_fits(run, memory, host_stated)
    judged_on = {
        "device": "every GPU's check",
        "host": "the host check",
        "both": "every GPU's check"
        + (" and the host check" if host_stated else " (host RAM not stated: host not judged)"),
    }[memory]
    version = row.setup.deepspeed_version
    planned_for = f", DeepSpeed {version} as the row states" if version else ", the installed DeepSpeed"
    return judge_outcome(
        row.published.outcome,
        row.published.oom_memory,
        verdict,
        need,
        f"the plan ({run.scheme}, {run.ranks} ranks, {run.dtype}{planned_for}) on {judged_on}",
    )


def planned_at_level(run: MeasuredRun, level: str) -> tuple[Spread, str]:
    """The plan's figure at one of its levels (:data:`zerogate.config.published_setups.PLAN_LEVEL_OF`): a
    device level of the peak prediction (zerogate.predict.peak.peak_prediction), or the host check's need;
    with what it is, in words."""
    if level == "host":
        host = next(c for c in run.checks if c.rank is None)
        need = host.need_bytes
        low = need if host.need_low_bytes is None else host.need_low_bytes
        high = need if host.need_high_bytes is None else host.need_high_bytes
        return Spread(low, need, high), "the host check's need"
    counts, setup, activations = run.planned
    point = peak_prediction(counts, setup, None, activations).levels[level]
    # The interval at that level from the terms' own uncertainty (zerogate.predict.fit.device_need's bounds).
    low, high = zerogate_terms(counts, setup, activations).device_bounds()
    at_low, at_high = (getattr(device_levels(bound), level) for bound in (low, high))
    nominal = point.predicted_bytes
    return Spread(min(at_low, nominal), nominal, max(at_high, nominal)), point.what


def peak_check(row: MeasuredRow, run: MeasuredRun) -> FigureCheck:
    """A published figure against the plan's figure at the level it was read at."""
    published = row.published
    assert published.peak_bytes is not None
    plan_level = level_of_metric(published.level)
    spread, what = planned_at_level(run, plan_level)
    return judge_reading(
        reading_quantity(row),
        published.peak_bytes,
        published.level,
        spread,
        f"{what} (plan level {plan_level})",
        lower_bound=published.level == OOM_MESSAGE,
    )


def check_measured_row(row: MeasuredRow, config: Any, repo: Path) -> RowCheck:
    """The row's published figures against the plan of its run on its hardware."""
    published = row.published
    memory = published.oom_memory or "both"
    host_stated = row.hardware.host_ram_bytes is not None
    wanted = wanted_figures(row)
    unstated = unstated_facts(row, memory, host_stated)
    if unstated:
        why = f"the source does not state {', '.join(unstated)}, which the plan needs"
        return row_check(row, [not_judged(q, p, t, why) for q, p, t in wanted])
    if row.hardware.platform in UNPLANNED_PLATFORMS:
        why = UNPLANNED_PLATFORMS[row.hardware.platform]
        return row_check(row, [not_judged(q, p, t, why) for q, p, t in wanted])
    try:
        run = plan_measured(row, config, repo)
    except InputError as error:
        why = f"the planner cannot plan this run: {error}"
        return row_check(row, [missed(q, p, t, why) for q, p, t in wanted])
    judged = [outcome_check(row, run, memory, host_stated)]
    if published.largest_micro_batch is not None:

        def verdict_at(micro_batch: int) -> str:
            return judged_fits(plan_measured(row, config, repo, micro_batch), "both", host_stated)[0]

        judged.append(
            judge_largest_micro_batch(
                published.largest_micro_batch,
                largest_micro_batch(lambda m: verdict_at(m) == FITS),
                "the same plan at each micro-batch, accumulation as published",
                may_fit=largest_micro_batch(lambda m: verdict_at(m) != DOES_NOT_FIT),
            )
        )
    if published.peak_bytes is not None:
        judged.append(peak_check(row, run))
    return row_check(row, judged, run.not_expressed)
