"""What a profile asks of training and the run honours: a model from a config.json (any architecture), the
attention implementation, activation checkpointing under ZeRO-3, and the sampled step's live-tensor peak.
Against REAL DeepSpeed ZeRO-3 engines in a one-rank world (gloo, CPU accelerator)."""

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.helpers import settings
from tests.unit.test_ledger import rendered
from tests.unit.test_model import manifest
from zerogate.config.settings import ModelSettings
from zerogate.contracts.data import ModelInfo
from zerogate.model.build import load_for_training
from zerogate.runtime import loop
from zerogate.runtime.engines import DeepSpeedEngine
from zerogate.runtime.launch import free_port, one_rank_config, remove_shm_buffers

TINY_GPT2 = Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-gpt2.json"
SEQ = 16


@pytest.fixture(scope="module")
def world():
    saved = {k: os.environ.get(k) for k in ("DS_ACCELERATOR", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                             "LOCAL_RANK", "LOCAL_SIZE")}
    port = free_port()
    os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_SIZE="1")
    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        pytest.skip("DeepSpeed's accelerator was already chosen as non-CPU in this session")
    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo")
    yield
    dist.destroy_process_group()
    remove_shm_buffers(port)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class Rows:
    """A few rows of the tiny vocabulary (the shape RankBatches reads)."""

    def __init__(self, rows: int = 8, length: int = SEQ, vocab: int = 300) -> None:
        ids = (np.arange(rows * length, dtype=np.int64).reshape(rows, length) * 7) % vocab
        self.input_ids, self.labels, self.attention_mask = ids, ids.copy(), np.ones_like(ids)


def gpt2_run(checkpointing: bool = False, attention: str = "sdpa"):
    """cpu-tiny's run spec with the tiny GPT-2 of tests/data/models as its model (model.config), and the
    rendered config for one rank."""
    model = ModelSettings(config=str(TINY_GPT2), attention=attention)
    tiny = settings("cpu-tiny")
    profile = dataclasses.replace(tiny, model=model,
                                  training=dataclasses.replace(tiny.training, activation_checkpointing=checkpointing),
                                  dataset=dataclasses.replace(tiny.dataset, seq_len=SEQ))
    from zerogate.config.profile import with_model_config

    ds, spec = rendered(with_model_config(profile))
    return ds, spec


def train_one_step(checkpointing: bool, attention: str = "sdpa") -> tuple[DeepSpeedEngine, float]:
    ds, spec = gpt2_run(checkpointing, attention)
    config = one_rank_config(ds.raw)
    config["gradient_accumulation_steps"], config["train_micro_batch_size_per_gpu"] = 2, 2
    config["train_batch_size"] = 4
    torch.manual_seed(0)
    info = ModelInfo(source="shape", kind="shape", directory=None, vocab_size=300)
    model = load_for_training(spec, manifest(info, vocab_size=300, seq_len=SEQ), config)
    engine = DeepSpeedEngine(model, config)
    engine.train()
    losses = []

    class Record(loop.LoopHooks):
        def at_boundary(self, engine, window):
            losses.append(float(window.mean_loss))
            return super().at_boundary(engine, window)

    loop.run(engine, loop.RankBatches(Rows(), 1, 0, 2, 2, 0), 2, 0, 1, Record())
    return engine, losses[0]


def test_a_config_defined_shape_only_model_trains_under_zero3_with_its_attention(world):
    engine, loss = train_one_step(checkpointing=False)
    module = engine.module
    assert type(module).__name__ == "GPT2LMHeadModel" and module.config._attn_implementation == "sdpa"
    assert module.config.n_embd == 32 and module.config.eos_token_id == 2  # the manifest's end of sequence
    assert np.isfinite(loss) and not module.is_gradient_checkpointing
    assert engine.parameter_count() == 32 * 300 + 64 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
    engine.destroy()
    eager, eager_loss = train_one_step(checkpointing=False, attention="eager")
    assert eager.module.config._attn_implementation == "eager"
    assert eager_loss == pytest.approx(loss, rel=1e-4)  # the same arithmetic, another kernel
    eager.destroy()


def test_activation_checkpointing_trains_under_zero3_and_recomputes_the_same_loss(world):
    plain, plain_loss = train_one_step(checkpointing=False)
    plain.destroy()
    checkpointed, loss = train_one_step(checkpointing=True)
    assert checkpointed.module.is_gradient_checkpointing and checkpointed.module.config.use_cache is False
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    assert checkpointed.grad_norm() is not None and np.isfinite(checkpointed.grad_norm())
    checkpointed.destroy()


def test_the_sampled_step_counts_every_live_tensor_and_names_the_buckets(world):
    from zerogate.contracts.records import LiveTensorPeak
    from zerogate.train.live_peak import sample_step

    engine, _ = train_one_step(checkpointing=False)
    reduce_bucket = engine.engine.optimizer.reduce_bucket_size
    sampled = LiveTensorPeak.of(sample_step(engine, loop.RankBatches(Rows(), 1, 0, 2, 2, 0), 2, 1, 0), "test")
    assert sampled.step == 2 and sampled.rank == 0
    # The contiguous gradient bucket, fp32 on the CPU, allocated at full size: the buckets' measured bytes.
    assert sampled.buffers_bytes == {"reduce_bucket": 4 * reduce_bucket}
    # Alive at the start: at least the bucket and the model states; the step adds its activations on top.
    parameters = engine.parameter_count()
    assert sampled.at_start_bytes >= 4 * reduce_bucket + 4 * 4 * parameters
    assert sampled.peak_bytes > sampled.at_start_bytes
    engine.destroy()
