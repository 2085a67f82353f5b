"""prepare_model for a local Hugging Face directory, and loading its weights for training."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from zerogate.errors import InputError
from zerogate.model.build import load_for_training, materialise
from zerogate.model.sources import parse_source


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf")
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def test_materialise_records_the_models_own_shape(hf_dir, tmp_path):
    info = materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", {"hidden_size": 16})
    assert info["kind"] == "hf_dir" and info["directory"] == str(hf_dir)
    assert (info["hidden_size"], info["vocab_size"], info["tie_word_embeddings"]) == (16, 40, True)
    assert json.loads((tmp_path / "model.json").read_text()) == info


def test_hidden_size_that_disagrees_with_the_model_is_refused(hf_dir, tmp_path):
    with pytest.raises(InputError, match="p.yaml: model.hidden_size: hidden_size 64 but the model has 16"):
        materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", {"hidden_size": 64})
    with pytest.raises(InputError, match="p.yaml: model.num_hidden_layers: num_hidden_layers 30 but the model has 1"):
        materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", {"hidden_size": 16, "num_hidden_layers": 30})
    assert materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml",
                       {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 40, "tie_word_embeddings": True})


def test_pretrained_weights_are_loaded_not_reinitialised(hf_dir, tmp_path):
    info = materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", {"hidden_size": 16})
    model = load_for_training(info, {}, {}, {"zero_optimization": {"stage": 0}})
    saved = LlamaForCausalLM.from_pretrained(hf_dir)
    for (name, a), (_, b) in zip(model.state_dict().items(), saved.state_dict().items()):
        assert torch.equal(a, b), name
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied embeddings stay tied


def test_one_model_the_trained_shape_model_is_the_planned_one(tiny_profile, tmp_path, monkeypatch):
    """Decision 3 of issue 10: training built the model with the tokenizer's vocabulary (167 for the
    default) while the planner counted dataset.vocab_size (256): two parameter counts in one report."""
    import contextlib

    import deepspeed

    from zerogate.model.build import planned_model_config
    from zerogate.model.sources import SHAPE

    # zero.Init wants a process group even when disabled; the model built inside it is what matters here.
    monkeypatch.setattr(deepspeed.zero, "Init", lambda **kwargs: contextlib.nullcontext())
    from zerogate.plan.ledger import count_parameters

    planned = count_parameters(planned_model_config(tiny_profile["model"], tiny_profile["dataset"]))
    manifest = {"settings": tiny_profile["dataset"], "vocab_size": 167, "seq_len": tiny_profile["dataset"]["seq_len"],
                "eos_token_id": 2}
    info = materialise(parse_source("shape"), tmp_path, "p.yaml", tiny_profile["model"])
    assert info["kind"] == SHAPE and "vocab_size" not in info  # the profile's dataset.vocab_size decides
    trained = load_for_training(info, tiny_profile["model"], manifest, {"zero_optimization": {"stage": 0}})
    assert trained.config.vocab_size == tiny_profile["dataset"]["vocab_size"] == planned.vocab
    assert sum(p.numel() for p in trained.parameters()) == planned.total


def test_a_shape_with_its_own_vocabulary_records_it_for_the_tokenizer_check(tmp_path):
    info = materialise(parse_source("shape"), tmp_path, "p.yaml", {"hidden_size": 16, "vocab_size": 100})
    assert info["vocab_size"] == 100
