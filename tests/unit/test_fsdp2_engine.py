"""The FSDP2 engine (zerogate.runtime.engines.Fsdp2Engine) in a one-rank world (gloo, CPU accelerator),
through
the one loop: it shards every decoder layer and the root, trains with the rendered config's optimizer and
schedule, and a checkpoint it saves resumes the run exactly (the same losses and learning rates as the run
that went on). In a fresh interpreter, as the DeepSpeed engine tests are."""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.unit.test_training_features import REPO, Rows, one_rank_world
from zerogate.runtime import loop

STEPS, SAVE_AT = 4, 2


def train(engine, start: int, stop: int) -> list[tuple[float, float]]:
    """(window loss, learning rate) of steps ``start`` .. ``stop`` - 1 through the one loop."""
    seen = []

    class Record(loop.LoopHooks):
        def at_boundary(self, engine, window):
            seen.append((float(window.mean_loss), engine.lr()))
            return super().at_boundary(engine, window)

    loop.run(engine, loop.RankBatches(Rows(), 1, 0, 2, 2, 0), 2, start, stop, Record())
    return seen


def worker(directory: str) -> None:
    from pathlib import Path

    from torch.distributed.fsdp import FSDPModule
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.unit.test_ledger import rendered
    from zerogate.runtime.engines import Fsdp2Engine
    from zerogate.runtime.launch import one_rank_config, remove_own_shm_buffers

    port = one_rank_world()
    config = one_rank_config(rendered("cpu-tiny")[0].raw)
    (
        config["gradient_accumulation_steps"],
        config["train_micro_batch_size_per_gpu"],
        config["train_batch_size"],
    ) = 2, 2, 4

    def engine():
        torch.manual_seed(0)
        shape = LlamaConfig(
            vocab_size=300,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
        )
        shape._attn_implementation = "eager"
        made = Fsdp2Engine(LlamaForCausalLM(shape), config, 2)
        made.train()
        return made

    first = engine()
    units = [type(m).__name__ for m in first.module.modules() if isinstance(m, FSDPModule)]
    found = {
        "units": units,
        "parameters": first.parameter_count(),
        "whole_parameters": sum(p.numel() for p in LlamaForCausalLM(first.module.config).parameters()),
        "whole": train(first, 0, SAVE_AT),
    }
    first.save(Path(directory) / "step2")
    found["whole"] += train(first, SAVE_AT, STEPS)
    second = engine()
    second.load(Path(directory) / "step2")
    found["resumed"] = train(second, SAVE_AT, STEPS)
    remove_own_shm_buffers(port)  # this process maps them: remove_shm_buffers would keep them
    print("RESULT " + json.dumps(found))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "workflow")])}
    directory = tmp_path_factory.mktemp("fsdp2-checkpoint")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from tests.unit.test_fsdp2_engine import worker; worker({str(directory)!r})",
        ],
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


def test_every_decoder_layer_and_the_root_are_fsdp2_units(trained):
    assert trained["units"] == ["FSDPLlamaForCausalLM", "FSDPLlamaDecoderLayer", "FSDPLlamaDecoderLayer"]
    assert trained["parameters"] == trained["whole_parameters"]  # counted whole, not this rank's shard


def test_it_learns_under_the_configs_schedule(trained):
    losses = [loss for loss, _ in trained["whole"]]
    rates = [lr for _, lr in trained["whole"]]
    assert len(losses) == STEPS and all(loss == loss for loss in losses)
    assert rates[0] < rates[-1]  # the warm-up of the rendered WarmupCosineLR


def test_a_saved_checkpoint_resumes_the_run_exactly(trained):
    assert trained["resumed"] == trained["whole"][SAVE_AT:]
