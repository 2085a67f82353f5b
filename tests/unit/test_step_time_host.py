"""The host's work beside a GPU's kernels at ZeRO-3 on a box nobody measured: the project's one measured
ZeRO-3 step on a GPU, per hooked module (zerogate.predict.step_time_modules.DESCRIBED_GPU_HOST)."""

import dataclasses
from pathlib import Path

import pytest
import yaml
from transformers import Qwen2Config

from tests.unit.test_step_time import NVLINK_BOX, gpu_lines, qwen3_8b, zero3_setup
from zerogate.config.machines import load_description
from zerogate.model.counts import count_parameters
from zerogate.predict.step_time import step_time
from zerogate.predict.step_time_modules import DESCRIBED_GPU_HOST, GPU_HOST, module_terms
from zerogate.predict.step_time_terms import HOST_WORK

REPO = Path(__file__).resolve().parents[2]


def test_a_described_gpu_box_at_zero3_takes_the_measured_h200_step_per_hooked_module():
    nvlink_box = load_description(NVLINK_BOX)
    setup = zero3_setup()
    counts = qwen3_8b().model_copy(update={"modules": 400, "modules_in_blocks": 0})
    for measured in (None, gpu_lines(stage=2)):  # nothing measured, or the stacks at another stage
        (host,) = module_terms(counts, setup, nvlink_box, measured)
        rate = DESCRIBED_GPU_HOST.seconds / DESCRIBED_GPU_HOST.hooked_modules
        g = setup.accumulation
        assert host.name == GPU_HOST and host.kind == HOST_WORK
        assert host.seconds == pytest.approx((400 * rate * 0.5 * g, 400 * rate * 2.0 * g))
        assert "lent H200" in host.source and "assumed" in host.source
        assert not any(m.startswith(GPU_HOST) for m in step_time(counts, setup, nvlink_box, measured).missing)
    # Activation checkpointing: the decoder layers' modules run their forward hooks again, at none to half
    # the rate a module (the fast end unchanged).
    blocks = counts.model_copy(update={"modules_in_blocks": 360})
    (plain,) = module_terms(blocks, setup, nvlink_box, None)
    checkpointed = dataclasses.replace(setup, activation_checkpointing=True)
    (again,) = module_terms(blocks, checkpointed, nvlink_box, None)
    assert again.seconds[0] == pytest.approx(plain.seconds[0])
    assert again.seconds[1] == pytest.approx(plain.seconds[1] * (400 + 360 / 2) / 400)
    assert "360 modules run their forward again" in again.source


def test_the_described_host_steps_module_count_is_the_gpu_checks_model():
    # config/profiles/gpu-1x.yaml's shape, every module hooked (no leaf modules on CUDA).
    model = yaml.safe_load((REPO / "config/profiles/gpu-1x.yaml").read_text())["model"]
    shape = {k: model[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")}
    shape |= {k: model[k] for k in ("num_key_value_heads", "intermediate_size", "vocab_size")}
    counts = count_parameters(Qwen2Config(**shape, tie_word_embeddings=model["tie_word_embeddings"]))
    assert counts.total == model["parameters"]
    assert counts.modules == DESCRIBED_GPU_HOST.hooked_modules
