"""What a run is: the rendered run spec (``deepspeed/run_spec.json``), the deviations from the claim's
config (``deepspeed/deviations.json``), the training loop's settings (``train/settings.json``) and the
typed view of DeepSpeed's own config file (``deepspeed/ds_config.json``).

Settings flow one way: the profile, typed once (zerogate.config.settings.ProfileSettings), becomes the run
spec and the training settings, which every consumer reads. The run spec holds what the machine-dependent
stages need (geometry, model, world, precision, threads, nodes): the planner, the measurements and
training read it. The training settings hold what only the training loop acts on (stabiliser,
checkpoints, evaluation), in a file of their own, so that changing how often to evaluate or checkpoint
retrains but never re-plans or re-measures the machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, model_validator

from zerogate.config.model_data import ModelSettings
from zerogate.config.settings import ProfileSettings
from zerogate.config.training import (
    CheckpointSettings,
    EvaluationSettings,
    RunTraining,
    StabiliserSettings,
    check_checkpoint_needs,
    check_inject,
)
from zerogate.contracts.base import Artefact, Record
from zerogate.errors import InputError

Dtype = Literal["fp32", "fp16", "bf16"]


class NodesSpec(Record):
    """Several nodes, as rendered (zerogate.runtime.nodes): the launcher lays them out again inside a Slurm
    allocation, where the hosts become known."""

    mode: Literal["no_ssh", "slurm"]
    hosts: list[str]
    ranks_per_node: int
    master_addr: str
    collective_timeout_s: float | None = None
    section: dict[str, Any] | None = None  # the profile's nodes section
    profile_file: str = "profile"  # named in the launcher's errors


class RunSpec(Artefact):
    """Everything a launched rank, the planner and the measurements need besides DeepSpeed's config."""

    CONTRACT = "run_spec"

    world_size: int
    accelerator: Literal["cpu", "cuda"]
    backend: Literal["gloo", "nccl"]
    dtype: Dtype
    env: dict[str, str]  # DS_ACCELERATOR and each rank's thread-pool sizes
    nodes: NodesSpec | None = None
    model: ModelSettings
    training: RunTraining
    seq_len: int  # tokens per row: the dataset is built, the model counted and planned at this length
    vocab_size: int  # a shape-only model's vocabulary (dataset.vocab_size unless model.vocab_size fixes it)

    @property
    def threads_per_rank(self) -> int:
        return int(self.env.get("OMP_NUM_THREADS", "1"))


class TrainSettings(Artefact):
    """What the training loop acts on besides the run spec: the stabiliser (also the gates' spike rule),
    checkpoints and evaluation, every default filled in."""

    CONTRACT = "train_settings"

    stabiliser: StabiliserSettings
    checkpoint: CheckpointSettings
    evaluation: EvaluationSettings

    @model_validator(mode="after")
    def _consistent(self) -> TrainSettings:
        """The cross-field checks of zerogate.config.training hold for the file too, however it is made
        (write_train_settings builds it from the rule's params; the training loop reads it without the
        profile's schema): an export or a rollback needs saved checkpoints, an injection its keys."""
        try:
            check_inject(self.stabiliser.inject)
            check_checkpoint_needs(self.stabiliser, self.checkpoint)
        except InputError as error:
            raise ValueError(f"{error.key}: {error.problem}") from None
        return self

    @classmethod
    def from_profile(cls, settings: ProfileSettings) -> TrainSettings:
        check_checkpoint_needs(settings.stabiliser, settings.checkpoint)
        return cls(
            stabiliser=settings.stabiliser, checkpoint=settings.checkpoint, evaluation=settings.evaluation
        )


class Deviation(Record):
    """One difference between the rendered DeepSpeed config and the claim's published one."""

    path: str  # dotted key in the DeepSpeed config
    claim: Any  # the claim's value (None when the claim leaves the key out)
    rendered: Any
    kind: Literal[
        "changed", "resolved", "chosen"
    ]  # differs | an "auto" made concrete | left open by the claim
    reason: str
    changes_experiment: bool  # False only where the claim's intent is kept (auto resolved, open choice made)


class Deviations(Artefact):
    CONTRACT = "deviations"

    deviations: list[Deviation]

    @property
    def changing_the_experiment(self) -> list[Deviation]:
        return [d for d in self.deviations if d.changes_experiment]


class OffloadView(Record):
    model_config = ConfigDict(extra="allow")
    device: str = "none"
    pin_memory: bool = False

    @property
    def on(self) -> bool:
        return self.device in ("cpu", "nvme")


class ZeroView(Record):
    """The zero_optimization keys zerogate reads (DeepSpeed's DeepSpeedZeroConfig has the rest)."""

    model_config = ConfigDict(extra="allow")
    stage: int = 0
    offload_optimizer: OffloadView | None = None
    offload_param: OffloadView | None = None


class PrecisionView(Record):
    model_config = ConfigDict(extra="allow")
    enabled: bool | Literal["auto"] = False


class DsConfig(Record):
    """A DeepSpeed config file (DeepSpeed's format: no contract stamp, read by DeepSpeed itself), seen
    through the keys zerogate reads; every key was checked against DeepSpeed's config classes when it was
    rendered (zerogate.render.ds_keys), so the others are kept as they are."""

    model_config = ConfigDict(extra="allow")
    train_micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    train_batch_size: int | None = None
    zero_optimization: ZeroView = ZeroView()
    fp16: PrecisionView | None = None
    bf16: PrecisionView | None = None
    gradient_clipping: float = 0.0
    optimizer: dict[str, Any] | None = None

    @classmethod
    def read(cls, path: Any) -> DsConfig:
        return cls.of(json.loads(Path(path).read_text()), str(path))

    @property
    def raw(self) -> dict[str, Any]:
        """The whole config as DeepSpeed reads it."""
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def stage(self) -> int:
        return self.zero_optimization.stage

    @property
    def dtype(self) -> Dtype:
        """The precision DeepSpeed trains in under this config: what the planner sizes and the run labels."""
        if self.bf16 is not None and self.bf16.enabled is True:
            return "bf16"
        if self.fp16 is not None and self.fp16.enabled is True:
            return "fp16"
        return "fp32"

    @property
    def loss_scaler(self) -> bool:
        """Whether fp16's dynamic loss scaler runs (and so can skip steps on overflow)."""
        return self.dtype == "fp16"
