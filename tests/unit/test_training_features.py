"""What a profile asks of training and the run honours: a model from a config.json (any architecture), the
attention implementation, activation checkpointing under ZeRO-3, and the sampled step's live-tensor peak.
Against REAL DeepSpeed ZeRO-3 engines in a one-rank world (gloo, CPU accelerator)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.helpers import settings
from tests.unit.test_ledger import rendered
from tests.unit.test_model import manifest
from zerogate.config.model_data import ModelSettings
from zerogate.contracts.data import ModelInfo
from zerogate.model.build import load_for_training
from zerogate.runtime import loop
from zerogate.runtime.engines import DeepSpeedEngine
from zerogate.runtime.launch import one_rank_config, remove_own_shm_buffers

REPO = Path(__file__).resolve().parents[2]
TINY_GPT2 = REPO / "tests" / "data" / "models" / "tiny-gpt2.json"
SEQ = 16


def one_rank_world() -> int:
    """This process as a one-rank world on the CPU accelerator (the worker below runs in a fresh interpreter:
    DeepSpeed keeps its process groups in module globals, which another test's destroyed world would leave
    stale)."""
    from zerogate.runtime.launch import start_one_rank_world

    os.environ["DS_ACCELERATOR"] = "cpu"
    return start_one_rank_world("gloo")


class Rows:
    """A few rows of the tiny vocabulary (the shape RankBatches reads)."""

    def __init__(self, rows: int = 8, length: int = SEQ, vocab: int = 300) -> None:
        ids = (np.arange(rows * length, dtype=np.int64).reshape(rows, length) * 7) % vocab
        self.input_ids, self.labels, self.attention_mask = ids, ids.copy(), np.ones_like(ids)


def gpt2_run(checkpointing: bool = False, attention: str = "sdpa", loss_in_fp32: bool = True):
    """cpu-tiny's run spec with the tiny GPT-2 of tests/data/models as its model (model.config), and the
    rendered config for one rank."""
    model = ModelSettings(config=str(TINY_GPT2), attention=attention)
    tiny = settings("cpu-tiny")
    training = tiny.training.model_copy(
        update={"activation_checkpointing": checkpointing, "loss_in_fp32": loss_in_fp32}
    )
    dataset = tiny.dataset.model_copy(update={"seq_len": SEQ})
    profile = tiny.model_copy(update={"model": model, "training": training, "dataset": dataset})
    from zerogate.config.profile import with_model_config

    ds, spec = rendered(with_model_config(profile))
    return ds, spec


def train_one_step(
    checkpointing: bool, attention: str = "sdpa", loss_in_fp32: bool = True
) -> tuple[DeepSpeedEngine, float]:
    ds, spec = gpt2_run(checkpointing, attention, loss_in_fp32)
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


def worker() -> None:
    """Train the tiny GPT-2 one step each way and sample one step's live tensors; print what the tests
    check."""
    from zerogate.contracts.records import LiveTensorPeak
    from zerogate.train.live_peak import sample_step

    port = one_rank_world()
    found: dict = {}
    for name, checkpointing, attention, loss_in_fp32 in (
        ("sdpa", False, "sdpa", True),
        ("eager", False, "eager", True),
        ("checkpointed", True, "sdpa", True),
        ("loss_in_logits_dtype", False, "sdpa", False),
    ):
        engine, loss = train_one_step(checkpointing, attention, loss_in_fp32)
        module = engine.module
        found[name] = {
            "class": type(module).__name__,
            "attention": module.config._attn_implementation,
            "loss_function": module.loss_function.__name__,
            "n_embd": module.config.n_embd,
            "eos": module.config.eos_token_id,
            "loss": loss,
            "checkpointing": module.is_gradient_checkpointing,
            "use_cache": module.config.use_cache,
            "grad_norm": engine.grad_norm(),
            "parameters": engine.parameter_count(),
        }
        if name == "sdpa":
            sampled = LiveTensorPeak.of(
                sample_step(engine, loop.RankBatches(Rows(), 1, 0, 2, 2, 0), 2, 1, 0), "test"
            )
            found["sampled"] = {
                **sampled.as_json(),
                "reduce_bucket": engine.engine.optimizer.reduce_bucket_size,
            }
        engine.destroy()
    remove_own_shm_buffers(port)  # this process maps them: remove_shm_buffers would keep them
    print("RESULT " + json.dumps(found))


@pytest.fixture(scope="module")
def trained():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "workflow")])}
    done = subprocess.run(
        [sys.executable, "-c", "from tests.unit.test_training_features import worker; worker()"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(
        next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :]
    )


def test_a_config_defined_shape_only_model_trains_under_zero3_with_its_attention(trained):
    sdpa, eager = trained["sdpa"], trained["eager"]
    assert (
        sdpa["class"] == "GPT2LMHeadModel" and sdpa["attention"] == "sdpa" and eager["attention"] == "eager"
    )
    assert sdpa["n_embd"] == 32 and sdpa["eos"] == 2  # the config's shape, the manifest's end of sequence
    assert np.isfinite(sdpa["loss"]) and not sdpa["checkpointing"]
    # wte, wpe, two blocks (ln_1, c_attn, c_proj, ln_2, c_fc, mlp c_proj: 12 h^2 + 13 h), ln_f; lm_head tied.
    assert sdpa["parameters"] == 32 * 300 + 64 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
    assert eager["loss"] == pytest.approx(sdpa["loss"], rel=1e-4)  # the same arithmetic, another kernel


def test_activation_checkpointing_trains_under_zero3_and_recomputes_the_same_loss(trained):
    checkpointed, plain = trained["checkpointed"], trained["sdpa"]
    assert checkpointed["checkpointing"] and checkpointed["use_cache"] is False
    assert checkpointed["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert checkpointed["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)


def test_the_sampled_step_counts_every_live_tensor_and_names_the_buckets(trained):
    sampled, parameters = trained["sampled"], trained["sdpa"]["parameters"]
    assert sampled["step"] == 2 and sampled["rank"] == 0
    # The contiguous gradient bucket, fp32 on the CPU, allocated at full size: the buckets' measured bytes.
    assert sampled["buffers(bytes)"] == {"reduce_bucket": 4 * sampled["reduce_bucket"]}
    # Alive at the start: at least the bucket and four fp32 model-state copies; the step adds activations on
    # top.
    assert sampled["at_start(bytes)"] >= 4 * sampled["reduce_bucket"] + 4 * 4 * parameters
    assert sampled["peak(bytes)"] > sampled["at_start(bytes)"]


def test_the_loss_in_the_logits_dtype_trains_and_at_fp32_gives_the_upcast_loss(trained):
    plain, own = trained["sdpa"], trained["loss_in_logits_dtype"]
    assert (
        plain["loss_function"] == "ForCausalLMLoss"
        and own["loss_function"] == "causal_lm_loss_in_logits_dtype"
    )
    # In fp32 (the CPU profile) the upcast is a no-op: the same loss and gradients, another function.
    assert own["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert own["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-6)
