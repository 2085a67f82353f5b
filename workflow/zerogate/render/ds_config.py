"""Render the claim's DeepSpeed config into a concrete one for this machine and profile.

Every difference from the claim's published config is recorded as a deviation with its reason, so the
report can say whether a run is a faithful reproduction. The rendered config is checked by DeepSpeed's own
config class, so this module loads DeepSpeed: what the Snakefile needs while it builds the DAG is in
zerogate.render.claim and zerogate.render.overrides.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from deepspeed.runtime.config import DeepSpeedConfig

from zerogate.config.model_data import ModelSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import Deviation, Deviations, DsConfig, RunSpec
from zerogate.errors import InputError
from zerogate.render.claim import check_keys
from zerogate.render.cpu_tuning import cpu_comm_overrides
from zerogate.render.ds_keys import unknown_keys
from zerogate.render.overrides import MISSING, find_auto, get_path, nested, set_path
from zerogate.render.world import check_batch, nodes_spec, thread_env, threads_per_rank, world_size
from zerogate.runtime.nodes import NodeLayout


@dataclass(frozen=True)
class RenderInputs:
    """What :func:`render` renders the claim under: the profile's settings (model, training, DeepSpeed
    overrides, sequence length, ``vocab_size``: a shape-only model's vocabulary, model.vocab_size else
    dataset.vocab_size), this machine (``fingerprint``; ``nodes``: the checked layout of the profile's
    ``nodes`` section, None or one node: this machine, and the section itself) and the file names its
    errors give."""

    model: ModelSettings
    training: RunTraining
    overrides: list[dict[str, Any]]
    seq_len: int
    vocab_size: int
    fingerprint: Fingerprint
    template_file: str
    profile_file: str = "profile"
    # The profile file that sets training.train_batch_size (an ancestor of the one named, perhaps).
    batch_file: str = "profile"
    nodes: NodeLayout | None = None
    nodes_section: dict[str, Any] | None = None


class _Renderer:
    def __init__(self, claim: dict[str, Any]) -> None:
        self.claim = claim
        self.config = copy.deepcopy(claim)
        self.deviations: list[Deviation] = []

    def set(self, path: str, value: Any, kind: str, reason: str, changes_experiment: bool) -> None:
        before = get_path(self.claim, path)
        set_path(self.config, path, value)
        if before is not MISSING and before == value:
            return
        claim_value = None if before is MISSING else before
        self.deviations.append(
            Deviation(
                path=path,
                claim=claim_value,
                rendered=value,
                kind=kind,
                reason=reason,
                changes_experiment=changes_experiment,
            )
        )


def validate_with_deepspeed(config: dict[str, Any], file: str) -> None:
    """Build DeepSpeed's own config object from ``config``: ill-typed values and inconsistent settings
    raise here, on any machine, before a launch.

    Outside a launched job DeepSpeedConfig sees one rank, so the global batch is left for it to derive
    from micro-batch x accumulation; render() has already checked their product with the rank count.
    """
    single = {k: v for k, v in config.items() if k != "train_batch_size"}
    try:
        DeepSpeedConfig(single)
    except Exception as error:  # pydantic ValidationError, AssertionError, ValueError: all mean a bad config
        first = " ".join(str(error).split())
        raise InputError(file, "", f"DeepSpeed rejects the rendered config: {first[:300]}") from None


def gpu_precision(r: _Renderer, devices: list[Any]) -> None:
    """The claim's precision where every device supports it; else the next one they do, as a deviation."""
    wants_bf16 = get_path(r.config, "bf16.enabled") is True
    wants_fp16 = get_path(r.config, "fp16.enabled") is True
    all_bf16 = all(d.bf16_supported for d in devices)
    all_fp16 = all(d.fp16_supported for d in devices)
    names = ", ".join(sorted({d.name for d in devices}))
    if wants_bf16 and not all_bf16:
        r.set(
            "bf16.enabled",
            False,
            "changed",
            f"bf16 requested but not supported by every device ({names})",
            True,
        )
        if all_fp16:
            r.set("fp16.enabled", True, "changed", "fp16 instead of the unsupported bf16", True)
    elif wants_fp16 and not all_fp16:
        r.set(
            "fp16.enabled",
            False,
            "changed",
            f"fp16 requested but not supported by every device ({names}); fp32",
            True,
        )


def _batch_geometry(r: _Renderer, training: RunTraining, ranks: int, batch_file: str) -> None:
    """The profile's micro-batch and accumulation; the global batch follows from them."""
    micro, accumulation = training.micro_batch_per_rank, training.gradient_accumulation_steps
    geometry_reason = f"profile geometry {micro} x {accumulation} x {ranks} ranks"
    r.set("train_micro_batch_size_per_gpu", micro, "changed", geometry_reason, True)
    r.set("gradient_accumulation_steps", accumulation, "changed", geometry_reason, True)
    r.set("train_batch_size", micro * accumulation * ranks, "changed", geometry_reason, True)
    check_batch(training, ranks, batch_file)


def _resolve_auto(r: _Renderer, model: ModelSettings, on_cpu: bool) -> None:
    """Every "auto" the Hugging Face rule resolves, and on the CPU accelerator its communication tuning."""
    hidden = model.hidden_size
    # "auto" is resolved only by the Hugging Face Trainer; plain DeepSpeed needs numbers. Same rules as
    # transformers.integrations.deepspeed (HfTrainerDeepSpeedConfig.trainer_config_finalize).
    auto_rules = {
        "zero_optimization.reduce_bucket_size": (hidden * hidden, "hidden_size^2"),
        "zero_optimization.stage3_prefetch_bucket_size": (int(0.9 * hidden * hidden), "0.9 x hidden_size^2"),
        "zero_optimization.stage3_param_persistence_threshold": (10 * hidden, "10 x hidden_size"),
    }
    # On DeepSpeed's CPU accelerator the communication settings that profiling found fastest
    # (zerogate.render.cpu_tuning): they change when and in what pieces gloo moves the same bytes, not the
    # arithmetic (beyond fp32 summation order).
    cpu_tuning = {o["path"]: o for o in cpu_comm_overrides(model.architecture)} if on_cpu else {}
    for path, (value, rule) in auto_rules.items():
        if get_path(r.config, path) != "auto":
            continue
        if path in cpu_tuning:
            tuned = cpu_tuning.pop(path)
            r.set(
                path,
                tuned["value"],
                "resolved",
                f'"auto" resolved for the CPU accelerator: {tuned["reason"]}',
                False,
            )
        else:
            r.set(path, value, "resolved", f'"auto" resolved as {rule} (hidden_size {hidden})', False)
    for path, tuned in cpu_tuning.items():
        r.set(path, tuned["value"], "changed", f"CPU accelerator, performance only: {tuned['reason']}", False)
    sub_group = get_path(r.config, "zero_optimization.sub_group_size")
    if isinstance(sub_group, float) and sub_group.is_integer():
        r.set(
            "zero_optimization.sub_group_size", int(sub_group), "resolved", "1e9 written as an integer", False
        )


def _precision(r: _Renderer, fingerprint: Fingerprint) -> None:
    """Keep the claim's precision where the hardware supports it."""
    if not fingerprint.on_cpu:
        gpu_precision(r, fingerprint.accelerator.devices)
        return
    if get_path(r.config, "fp16.enabled") is True:
        cpu = fingerprint.accelerator.cpu
        fp16_ok = cpu is not None and cpu.fp16_supported
        reason = (
            "DeepSpeed's CPU accelerator reports fp16 unsupported on this CPU"
            if not fp16_ok
            else "CPU runs train in fp32 (fp16/bf16 on CPUs run far slower than fp32, docs/reference.md "
            "section 5)"
        )
        r.set("fp16.enabled", False, "changed", reason + "; training in fp32", True)


def _open_choices(r: _Renderer, training: RunTraining) -> None:
    """What the claim leaves open: chosen by the profile."""
    optimizer = training.optimizer
    params = {k: v for k, v in optimizer.items() if k != "type"}
    r.set(
        "optimizer",
        {"type": optimizer["type"], "params": params},
        "chosen",
        "the claim names no optimizer",
        False,
    )
    r.set(
        "scheduler",
        {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": training.optimizer_steps,
                "warmup_num_steps": training.lr_warmup_steps,
                "warmup_type": "linear",
            },
        },
        "chosen",
        "the claim names no learning-rate schedule",
        False,
    )
    r.set(
        "gradient_clipping",
        training.gradient_clipping,
        "chosen",
        "the claim names no gradient clipping",
        False,
    )


def _profile_overrides(r: _Renderer, overrides: list[dict[str, Any]], profile_file: str) -> None:
    """The profile's explicit overrides, last, each with the reason the profile gives."""
    for index, override in enumerate(overrides):
        problem = dict(unknown_keys(nested(override["path"], override["value"])))
        if problem:
            path, why = next(iter(problem.items()))
            raise InputError(profile_file, f"deepspeed.overrides.{index}.path", f"{path}: {why}")
        r.set(override["path"], override["value"], "changed", override["reason"], True)


def _run_spec(inputs: RenderInputs, config: dict[str, Any], ranks: int, nodes: NodeLayout) -> RunSpec:
    """Everything the ranks, the planner and the measurements need besides the DeepSpeed config. The
    precision is the rendered config's, after every override (DsConfig.dtype), so what is planned,
    labelled and trained is what DeepSpeed will run."""
    on_cpu = inputs.fingerprint.on_cpu
    threads = threads_per_rank(inputs.fingerprint.cores, ranks, nodes)
    return RunSpec(
        world_size=ranks,
        accelerator="cpu" if on_cpu else "cuda",
        backend="gloo" if on_cpu else "nccl",
        dtype=DsConfig.of(config, inputs.template_file).dtype,
        env={"DS_ACCELERATOR": "cpu" if on_cpu else "cuda", **thread_env(threads)},
        nodes=nodes_spec(nodes, inputs.nodes_section, inputs.profile_file),
        model=inputs.model,
        # Warm-up exclusion is an analysis setting (zerogate.analysis.measures): not part of the run, so
        # editing it neither changes the checkpoint fingerprint (which hashes this spec) nor retrains.
        training=inputs.training,
        seq_len=inputs.seq_len,
        vocab_size=inputs.vocab_size,
    )


def render(claim: dict[str, Any], inputs: RenderInputs) -> tuple[dict[str, Any], Deviations, RunSpec]:
    """(ds_config, deviations, run spec) for the claim's config under the profile's settings on this machine
    (:class:`RenderInputs`)."""
    nodes = inputs.nodes or NodeLayout()
    check_keys(claim, inputs.template_file)
    r = _Renderer(claim)
    ranks = world_size(inputs.training, inputs.fingerprint, nodes)
    _batch_geometry(r, inputs.training, ranks, inputs.batch_file)
    _resolve_auto(r, inputs.model, inputs.fingerprint.on_cpu)
    _precision(r, inputs.fingerprint)
    _open_choices(r, inputs.training)
    _profile_overrides(r, inputs.overrides, inputs.profile_file)
    leftover = find_auto(r.config)
    if leftover:
        raise InputError(
            inputs.template_file, leftover[0], 'still "auto" after rendering: no rule resolves it'
        )
    validate_with_deepspeed(r.config, inputs.template_file)
    return r.config, Deviations(deviations=r.deviations), _run_spec(inputs, r.config, ranks, nodes)
