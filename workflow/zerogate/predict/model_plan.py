"""A plan of a model on a box (the plan_model target): the request (zerogate.config.plan_request) rendered
from the neutral base into a DeepSpeed config for the box, planned (zerogate.predict.planner.plan_for_run),
and every suggestion given the one command that plans it. No profile and no claim: the global batch is
derived by the rendering (micro-batch x accumulation x the box's ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerogate.config.launch import PlanSettings
from zerogate.config.machines import to_fingerprint
from zerogate.config.model_data import ModelSettings
from zerogate.config.plan_request import PlanBase, PlanRequest, changed, command
from zerogate.config.profile import model_with_config
from zerogate.contracts.base import typed
from zerogate.contracts.plan import Plan, Suggestion
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.errors import InputError
from zerogate.model.attention import supports
from zerogate.model.hf_config import config_file, load_config
from zerogate.predict.planner import plan_for_run
from zerogate.render.claim import read_claim
from zerogate.render.ds_config import RenderInputs, render

OFFLOAD_PATHS = {
    "optimizer": "zero_optimization.offload_optimizer",
    "param": "zero_optimization.offload_param",
}


def attention_for(request: PlanRequest) -> str:
    """The request's attention; ``auto``: sdpa where the model's transformers class supports it (its
    ``_supports_sdpa``, read by zerogate.model.attention.supports), else eager (Gemma-2's class, for one,
    supports no sdpa)."""
    config = load_config(config_file(request.model_config))
    sdpa = supports(config.model_type, "sdpa", getattr(config, "architectures", None))
    if request.attention == "sdpa" and not sdpa:
        raise InputError(
            "--config",
            "attention (ATTENTION)",
            f"transformers' class of {request.model_config} does not support sdpa: eager, or auto",
        )
    if request.attention != "auto":
        return request.attention
    return "sdpa" if sdpa else "eager"


def overrides(request: PlanRequest, base: PlanBase) -> list[dict[str, Any]]:
    """The request's ZeRO stage and offloads as DeepSpeed overrides of the base template, each with its
    reason."""
    reason = f"plan_model: zero={request.stage} offload={request.offload}"
    result: list[dict[str, Any]] = [
        {"path": "zero_optimization.stage", "value": request.stage, "reason": reason}
    ]
    for (kind, path), device in zip(OFFLOAD_PATHS.items(), request.offload_devices, strict=True):
        if device is None:
            continue
        value: dict[str, Any] = {"device": device, "pin_memory": True}
        if device == "nvme":
            value["nvme_path"] = base.nvme_path
        result.append({"path": path, "value": value, "reason": f"{reason} ({kind} to {device})"})
    return result


def render_request(request: PlanRequest, base: PlanBase, attention: str) -> tuple[dict[str, Any], RunSpec]:
    """(DeepSpeed config, run spec) of the request on its box: the base's template and training with the
    request's geometry; train_batch_size left for the rendering to derive."""
    # The config's positions were checked against the sequence while the DAG was built (plan_request).
    model, _ = model_with_config(
        typed(ModelSettings, {"source": "shape", "config": request.model_config, "attention": attention}),
        lambda key: "--config",
    )
    training = base.training.model_copy(
        update={
            "micro_batch_per_rank": request.micro_batch,
            "gradient_accumulation_steps": request.accumulation,
            "activation_checkpointing": request.checkpointing,
            "train_batch_size": None,
        }
    )
    ds_config, _, run_spec = render(
        read_claim(base.deepspeed_template),
        RenderInputs(
            model=model,
            training=training,
            overrides=overrides(request, base),
            seq_len=request.seq_len,
            vocab_size=model.vocab_size or 0,
            fingerprint=to_fingerprint(request.box),
            template_file=base.deepspeed_template,
            profile_file=str(Path("config/plan_base.yaml")),
        ),
    )
    return ds_config, run_spec


def offload_of(optimizer: bool, param: bool, nvme_optimizer: bool, nvme_param: bool) -> str | None:
    """The plan_model offload choice of a setup's offloads; None where none expresses it."""
    found = {
        (False, False, False, False): "none",
        (True, False, False, False): "optimizer",
        (True, True, False, False): "cpu",
        (True, False, True, False): "nvme-optimizer",
        (True, True, True, True): "nvme",
    }
    return found.get((optimizer, param, nvme_optimizer, nvme_param))


def suggestion_command(request: PlanRequest, plan: Plan, suggestion: Suggestion) -> str | None:
    """The make plan command of ``suggestion``; None where the change is not a plan_model argument (more
    nodes, page-locked host buffers, ranks bound to cores)."""
    settings = suggestion.settings
    offload = offload_of(
        settings.offload_optimizer, settings.offload_param, settings.nvme_optimizer, settings.nvme_param
    )
    not_a_plan_argument = settings.pin_memory is not None or settings.bind_cores is not None
    if settings.nodes != plan.nodes or offload is None or not_a_plan_argument:
        return None
    changes: dict[str, Any] = {
        "offload": offload,
        "micro_batch": settings.micro_batch,
        "accumulation": settings.accumulation,
        "checkpointing": settings.activation_checkpointing,
    }
    if settings.seq_len is not None:
        changes["seq_len"] = settings.seq_len
    if settings.host_ram_bytes is not None:
        changes["host_ram"] = f"{-(-settings.host_ram_bytes // 2**30)}GiB"
    return command(changed(request, **changes))


def with_commands(request: PlanRequest, plan: Plan) -> Plan:
    """``plan`` with each suggestion, device change, host change and time change given its make plan
    command."""

    def commanded(items: list[Suggestion]) -> list[Suggestion]:
        return [s.model_copy(update={"command": suggestion_command(request, plan, s)}) for s in items]

    return plan.model_copy(
        update={
            "suggestions": commanded(plan.suggestions),
            "device_changes": commanded(plan.device_changes),
            "host_changes": commanded(plan.host_changes),
            "time_changes": commanded(plan.time_changes),
        }
    )


def plan_model(request: PlanRequest, base: PlanBase) -> tuple[Plan, DsConfig]:
    """The request planned on its box, each suggestion with its command; and the DeepSpeed config as
    rendered for it."""
    ds_config, run_spec = render_request(request, base, attention_for(request))
    rendered = DsConfig.of(ds_config, base.deepspeed_template)
    plan = plan_for_run(
        run_spec, rendered, request.box, PlanSettings(), f"{request.model_name} on {request.box.name}"
    )
    return with_commands(request, plan), rendered
