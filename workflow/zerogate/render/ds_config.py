"""Render the claim's DeepSpeed config into a concrete one for this machine and profile.

Every difference from the claim's published config is recorded as a deviation with its reason, so the
report can say whether a run is a faithful reproduction.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from zerogate.config.model_data import ModelSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import Deviation, Deviations, DsConfig, NodesSpec, RunSpec
from zerogate.errors import InputError
from zerogate.render.cpu_tuning import cpu_comm_overrides
from zerogate.render.ds_keys import unknown_keys
from zerogate.runtime.nodes import NodeLayout, local_nodes

_MISSING = object()


def get_path(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def set_path(config: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = config
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def apply_overrides(ds_config: dict[str, Any], overrides: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``ds_config`` with each ``{"path": dotted.path, "value": ...}`` override set."""
    changed = copy.deepcopy(ds_config)
    for override in overrides:
        set_path(changed, override["path"], override["value"])
    return changed


def find_auto(config: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value still set to "auto"."""
    if isinstance(config, dict):
        return [p for k, v in config.items() for p in find_auto(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if config == "auto" else []


def thread_env(threads_per_rank: int) -> dict[str, str]:
    """Thread-pool sizes for each rank. All of them: Snakemake sets each to the job's thread count, and
    ranks x threads > cores thrashes (measured with 2 ranks on 2 cores, 0.44 s per optimizer step at one
    thread per rank; 2.5 s with OMP_NUM_THREADS=2, 2.0 s with only MKL_NUM_THREADS=2)."""
    names = (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "GOTO_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    )
    return {name: str(threads_per_rank) for name in names}


def world_size(training: RunTraining, fingerprint: Fingerprint, nodes: NodeLayout | None = None) -> int:
    """Several nodes: nodes x ranks per node. One node: one rank per GPU; without GPUs, the profile's
    cpu_ranks."""
    if nodes is not None and nodes.multi_node:
        return nodes.world_size
    accelerator = fingerprint.accelerator
    return accelerator.count if accelerator.kind == "cuda" else training.cpu_ranks


def nodes_spec(nodes: NodeLayout, section: dict[str, Any] | None, profile_file: str) -> NodesSpec | None:
    """The run spec's ``nodes``: the layout as rendered, and the profile's section, which the launcher
    lays out again inside a Slurm allocation (where the hosts become known)."""
    if not nodes.multi_node:
        return None
    return NodesSpec(
        mode=nodes.mode,
        hosts=list(nodes.hosts),
        ranks_per_node=nodes.ranks_per_node,
        master_addr=nodes.master_addr,
        collective_timeout_s=nodes.collective_timeout_s,
        section=section,
        profile_file=profile_file,
    )


class _Renderer:
    def __init__(self, claim: dict[str, Any]) -> None:
        self.claim = claim
        self.config = copy.deepcopy(claim)
        self.deviations: list[Deviation] = []

    def set(self, path: str, value: Any, kind: str, reason: str, changes_experiment: bool) -> None:
        before = get_path(self.claim, path)
        set_path(self.config, path, value)
        if before is not _MISSING and before == value:
            return
        claim_value = None if before is _MISSING else before
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


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``: an override as the config fragment it writes."""
    node: dict[str, Any] = {}
    set_path(node, dotted, value)
    return node


def check_keys(config: dict[str, Any], file: str) -> None:
    """Refuse a key DeepSpeed would not read (it ignores them silently), naming its dotted path."""
    problems = unknown_keys(config)
    if problems:
        path, why = problems[0]
        raise InputError(file, path, why)


def read_claim(path: str | Path, file: str | None = None) -> dict[str, Any]:
    """The claim's DeepSpeed config file, parsed and its keys checked (:func:`check_keys`); ``file`` is the
    name the error gives (the path as the profile states it)."""
    shown = file or str(path)
    try:
        claim = json.loads(Path(path).read_text())
    except OSError as error:
        raise InputError(shown, "", f"cannot be read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise InputError(shown, f"line {error.lineno}", f"not valid JSON ({error.msg})") from None
    if not isinstance(claim, dict):
        raise InputError(shown, "(top level)", "a DeepSpeed config is a JSON object")
    check_keys(claim, shown)
    return claim


def validate_with_deepspeed(config: dict[str, Any], file: str) -> None:
    """Build DeepSpeed's own config object from ``config``: ill-typed values and inconsistent settings
    raise here, on any machine, before a launch.

    Outside a launched job DeepSpeedConfig sees one rank, so the global batch is left for it to derive
    from micro-batch x accumulation; render() has already checked their product with the rank count.
    """
    from deepspeed.runtime.config import DeepSpeedConfig

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


def render(
    claim: dict[str, Any],
    *,
    model: ModelSettings,
    training: RunTraining,
    overrides: list[dict[str, Any]],
    seq_len: int,
    vocab_size: int,
    fingerprint: Fingerprint,
    template_file: str,
    profile_file: str = "profile",
    nodes: NodeLayout | None = None,
    nodes_section: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Deviations, RunSpec]:
    """(ds_config, deviations, run spec) for the claim's config under the profile's settings on this machine
    (``nodes``: the checked layout of the profile's ``nodes`` section; None or one node: this machine).
    ``vocab_size``: a shape-only model's vocabulary (model.vocab_size, else dataset.vocab_size)."""
    nodes = nodes or NodeLayout()
    check_keys(claim, template_file)
    r = _Renderer(claim)
    hidden = model.hidden_size
    ranks = world_size(training, fingerprint, nodes)
    on_cpu = fingerprint.on_cpu

    # Batch geometry: the profile's micro-batch and accumulation; the global batch follows from them.
    micro, accumulation = training.micro_batch_per_rank, training.gradient_accumulation_steps
    geometry_reason = f"profile geometry {micro} x {accumulation} x {ranks} ranks"
    r.set("train_micro_batch_size_per_gpu", micro, "changed", geometry_reason, True)
    r.set("gradient_accumulation_steps", accumulation, "changed", geometry_reason, True)
    r.set("train_batch_size", micro * accumulation * ranks, "changed", geometry_reason, True)
    wanted = training.train_batch_size
    if wanted is not None and wanted != micro * accumulation * ranks:
        raise InputError(
            profile_file,
            "training.train_batch_size",
            f"{wanted} != micro_batch_per_rank {micro} x gradient_accumulation_steps {accumulation} x "
            f"{ranks} ranks",
        )

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

    # Precision: keep the claim's fp16 where the hardware supports it.
    if on_cpu:
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
    else:
        gpu_precision(r, fingerprint.accelerator.devices)

    # What the claim leaves open: chosen by the profile.
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

    # The profile's explicit overrides, last, each with the reason the profile gives.
    for index, override in enumerate(overrides):
        problem = dict(unknown_keys(_nested(override["path"], override["value"])))
        if problem:
            path, why = next(iter(problem.items()))
            raise InputError(profile_file, f"deepspeed.overrides.{index}.path", f"{path}: {why}")
        r.set(override["path"], override["value"], "changed", override["reason"], True)

    leftover = find_auto(r.config)
    if leftover:
        raise InputError(template_file, leftover[0], 'still "auto" after rendering: no rule resolves it')
    validate_with_deepspeed(r.config, template_file)

    # Everything the ranks, the planner and the measurements need besides the DeepSpeed config. The
    # precision is the rendered config's, after every override (DsConfig.dtype), so what is planned,
    # labelled and trained is what DeepSpeed will run.
    cores = fingerprint.cores
    threads = max(1, cores // (nodes.ranks_per_node * local_nodes(nodes) if nodes.multi_node else ranks))
    run_spec = RunSpec(
        world_size=ranks,
        accelerator="cpu" if on_cpu else "cuda",
        backend="gloo" if on_cpu else "nccl",
        dtype=DsConfig.of(r.config, template_file).dtype,
        # The ranks that share this machine's cores: all of them on one node; on several, those of the
        # nodes that are this machine (two local nodes in the tests, one on a real cluster).
        env={"DS_ACCELERATOR": "cpu" if on_cpu else "cuda", **thread_env(threads)},
        nodes=nodes_spec(nodes, nodes_section, profile_file),
        model=model,
        # Warm-up exclusion is an analysis setting (zerogate.analysis.measures): not part of the run, so
        # editing it neither changes the checkpoint fingerprint (which hashes this spec) nor retrains.
        training=training,
        seq_len=seq_len,
        vocab_size=vocab_size,
    )
    return r.config, Deviations(deviations=r.deviations), run_spec
