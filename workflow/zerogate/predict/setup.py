"""What a prediction needs to know about a run: its setup (ranks, precision, geometry, ZeRO stage, offloads,
buckets), read from the rendered DeepSpeed config and the run spec, with DeepSpeed's defaults where the
config leaves a key out (zerogate.render.deepspeed_defaults, read from DeepSpeed's own config classes); and
which DeepSpeed release the run is planned for."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from importlib import metadata

from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.hardware import causal_attention_share
from zerogate.render.deepspeed_defaults import deepspeed_default, deepspeed_defaults

# Bytes per element (torch/_tensor_docs.py element_size: torch.float32 4, float16 and bfloat16 2).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # torch.<name> of each
SCHEMES = (
    "ddp",
    "zero1",
    "zero2",
    "zero2_offload_optimizer",
    "zero3",
    "zero3_offload_optimizer",
    "zero3_offload_all",
)


@dataclass(frozen=True)
class Setup:
    """What the ledger needs from the rendered DeepSpeed config, the profile and the machine."""

    ranks: int
    nodes: int
    dtype: str  # fp32 | fp16 | bf16: parameters and gradients on the device
    device_kind: str  # cuda | cpu
    micro_batch: int
    seq_len: int
    accumulation: int
    stage: int
    offload_optimizer: bool  # to the host or NVMe
    offload_param: bool
    pin_memory: bool
    reduce_bucket: int  # elements
    prefetch_bucket: int  # elements
    persistence_threshold: int  # elements
    activation_checkpointing: bool = False
    loss_in_fp32: bool = (
        True  # the cross-entropy on the logits upcast to fp32 (transformers' ForCausalLMLoss)
    )
    leaf_blocks: bool = False  # a leaf module class beyond DeepSpeed's defaults: whole blocks are gathered
    # elements: a parameter used again sooner stays gathered
    max_reuse_distance: int = deepspeed_default("max_reuse_distance")
    # elements gathered at most, prefetch included
    max_live_parameters: int = deepspeed_default("max_live_parameters")
    sub_group_size: int = deepspeed_default("sub_group_size")  # elements the ZeRO-3 optimizer steps at once
    overlap_comm: bool = False
    # The config's overlap_comm as written (None: left out, DeepSpeed's stage default applies): what the
    # step-time ledger resolves (zerogate.predict.step_time_terms.overlap_comm_on).
    overlap_comm_given: bool | None = None
    attention: str = "sdpa"  # the model's attn_implementation
    # The attention kernel a published run states where its plan traces another (flash_attention_2 is traced
    # as SDPA): the share of the attention's FLOP it computes (zerogate.hardware.causal_attention_share) is
    # that kernel's. None: Setup.attention's. "unknown": the source does not say.
    attention_kernel: str | None = None
    # Several samples packed into each row of seq_len, each attending within itself only (varlen attention,
    # e.g. flash-attention with position_ids restarting per sample): how long the samples are is not known, so
    # the attention's FLOP lies between none and one sequence of seq_len (zerogate.predict.step_time_terms).
    packed_samples: bool = False
    # Each rank bound to its share of the host's physical cores (deepspeed --bind_cores_to_rank: numactl -C,
    # and -m where the share lies on one NUMA node, deepspeed/utils/numa.py get_numactl_cmd); the pipeline's
    # own runs are not bound.
    bind_cores: bool = False
    nvme_optimizer: bool = False  # the optimizer offload goes to NVMe, not host RAM
    nvme_param: bool = False
    param_swap_buffer_count: int = deepspeed_default("param_buffer_count")  # offload_param.buffer_count
    param_swap_buffer_size: int = deepspeed_default(
        "param_buffer_size"
    )  # offload_param.buffer_size, elements
    optimizer_swap_buffer_count: int = deepspeed_default("optimizer_buffer_count")
    # The DeepSpeed release whose allocations are planned, as release numbers; None: the installed one. Only
    # a published run made with an older DeepSpeed is planned with another
    # (zerogate.bench.planner_validation).
    deepspeed_version: tuple[int, ...] | None = None
    # The optimizer step runs torch's Adam/AdamW on the device (the config names no optimizer, so the client's
    # is used, the HF Trainer's default; or it sets torch_adam: deepspeed/runtime/engine.py
    # get_optimizer_configuration) rather than DeepSpeed's FusedAdam or CPU Adam.
    torch_optimizer: bool = False
    # The transformers release a published run used, where it states one; None: the installed one, whose
    # loss the activation trace runs (zerogate.predict.zero_buffers.loss_logits_terms).
    transformers_version: tuple[int, ...] | None = None
    # CUDA's module loading: "lazy" (CUDA 11.7+, set by torch from 1.13) or "eager"
    # (zerogate.predict.cuda_terms).
    cuda_module_loading: str = "lazy"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.ranks // self.nodes)

    @property
    def attention_counted(self) -> str:
        """The attention kernel whose work the ledger counts: the one the run states, else the planned one."""
        return self.attention_kernel or self.attention

    @property
    def attention_share(self) -> tuple[float, float]:
        """(least, most) share of the attention's whole FLOP count the counted kernel computes under the
        causal mask (zerogate.hardware.causal_attention_share)."""
        return causal_attention_share(self.attention_counted, self.seq_len)

    @property
    def scheme(self) -> str:
        if self.stage == 0:
            return "ddp"
        if self.stage == 1:
            return "zero1"
        if self.stage == 2:
            return "zero2_offload_optimizer" if self.offload_optimizer else "zero2"
        if self.offload_param:
            return "zero3_offload_all"
        return "zero3_offload_optimizer" if self.offload_optimizer else "zero3"

    def with_scheme(self, scheme: str) -> Setup:
        stage = {"ddp": 0, "zero1": 1, "zero2": 2, "zero2_offload_optimizer": 2}.get(scheme, 3)
        offload_optimizer, offload_param = "offload" in scheme, scheme == "zero3_offload_all"
        return dataclasses.replace(
            self,
            stage=stage,
            offload_optimizer=offload_optimizer,
            offload_param=offload_param,
            nvme_optimizer=self.nvme_optimizer and offload_optimizer,
            nvme_param=self.nvme_param and offload_param,
        )


def setup_from_config(
    ds_config: DsConfig, run_spec: RunSpec, nodes: int = 1, activation_checkpointing: bool | None = None
) -> Setup:
    """The ledger's view of a rendered config (``ds_config.json``) and its ``run_spec.json``: seq_len,
    attention and activation checkpointing are the run spec's (``activation_checkpointing`` overrides it);
    DeepSpeed's defaults where the config leaves a key out."""
    defaults = deepspeed_defaults()
    zero = ds_config.zero_optimization
    extra = zero.model_extra or {}
    offloads = [o for o in (zero.offload_optimizer, zero.offload_param) if o is not None]
    leaf_classes = (extra.get("leaf_module") or {}).get("classes", [])
    optimizer_offload = (zero.offload_optimizer.model_extra or {}) if zero.offload_optimizer else {}
    param_offload = (zero.offload_param.model_extra or {}) if zero.offload_param else {}
    checkpointing = (
        run_spec.training.activation_checkpointing
        if activation_checkpointing is None
        else activation_checkpointing
    )
    return Setup(
        ranks=run_spec.world_size,
        nodes=nodes,
        dtype=run_spec.dtype,
        device_kind=run_spec.accelerator,
        micro_batch=ds_config.train_micro_batch_size_per_gpu,
        seq_len=run_spec.seq_len,
        accumulation=ds_config.gradient_accumulation_steps,
        stage=int(zero.stage),
        offload_optimizer=bool(zero.offload_optimizer and zero.offload_optimizer.on),
        offload_param=bool(zero.offload_param and zero.offload_param.on),
        pin_memory=any(o.pin_memory for o in offloads if o.on),
        reduce_bucket=int(extra.get("reduce_bucket_size", defaults.reduce_bucket_size)),
        prefetch_bucket=int(extra.get("stage3_prefetch_bucket_size", defaults.prefetch_bucket_size)),
        persistence_threshold=int(
            extra.get("stage3_param_persistence_threshold", defaults.param_persistence_threshold)
        ),
        activation_checkpointing=checkpointing,
        loss_in_fp32=run_spec.training.loss_in_fp32,
        leaf_blocks=any(c not in defaults.leaf_module_classes for c in leaf_classes),
        max_reuse_distance=int(extra.get("stage3_max_reuse_distance", defaults.max_reuse_distance)),
        max_live_parameters=int(extra.get("stage3_max_live_parameters", defaults.max_live_parameters)),
        sub_group_size=int(extra.get("sub_group_size", defaults.sub_group_size)),
        # DeepSpeed leaves overlap_comm None and resolves it to its stage's default: off below stage 3,
        # where the ledger reads it (ZeRO-1/2's buckets).
        overlap_comm=bool(extra.get("overlap_comm", False)),
        overlap_comm_given=None if extra.get("overlap_comm") is None else bool(extra["overlap_comm"]),
        attention=run_spec.model.attention,
        nvme_optimizer=bool(zero.offload_optimizer and zero.offload_optimizer.device == "nvme"),
        nvme_param=bool(zero.offload_param and zero.offload_param.device == "nvme"),
        param_swap_buffer_count=int(param_offload.get("buffer_count", defaults.param_buffer_count)),
        param_swap_buffer_size=int(param_offload.get("buffer_size", defaults.param_buffer_size)),
        optimizer_swap_buffer_count=int(
            optimizer_offload.get("buffer_count", defaults.optimizer_buffer_count)
        ),
        torch_optimizer=names_torch_optimizer(ds_config),
    )


def names_torch_optimizer(ds_config: DsConfig) -> bool:
    """Whether the run's optimizer step is torch's Adam/AdamW: the config names no optimizer (the client's,
    torch.optim.AdamW under the HF Trainer), or an Adam with ``torch_adam`` (deepspeed/runtime/engine.py
    get_optimizer_configuration)."""
    if ds_config.optimizer is None:
        return True
    params = ds_config.optimizer.get("params") or {}
    return bool(params.get("torch_adam", False))


def release(version: str) -> tuple[int, ...]:
    """A version's release numbers ("0.19.8+cpu" -> (0, 19, 8)), for ordering DeepSpeed releases."""
    numbers = re.match(r"\d+(\.\d+)*", version)
    if numbers is None:
        raise ValueError(f"not a release version: {version!r}")
    return tuple(int(part) for part in numbers.group(0).split("."))


@functools.cache
def installed_deepspeed() -> tuple[int, ...]:
    return release(metadata.version("deepspeed"))


def planned_deepspeed(setup: Setup) -> tuple[int, ...]:
    """The DeepSpeed release ``setup`` is planned for: its own where it names one, else the installed one."""
    return setup.deepspeed_version or installed_deepspeed()
