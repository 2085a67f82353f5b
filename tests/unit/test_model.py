"""prepare_model for a local Hugging Face directory, and loading its weights for training."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.unit.helpers import settings
from tests.unit.test_ledger import rendered
from zerogate.config.model_data import ModelSettings
from zerogate.contracts.data import DatasetManifest, ModelInfo, SplitStats
from zerogate.errors import InputError
from zerogate.model.build import load_for_training
from zerogate.model.prepare import materialise
from zerogate.model.sources import parse_source


def shape(**numbers) -> ModelSettings:
    """The profile's model section as stated: the shape numbers given (hidden_size at least)."""
    return ModelSettings(**numbers)


def manifest(
    model: ModelInfo, vocab_size: int = 167, eos_token_id: int | None = 2, seq_len: int = 64
) -> DatasetManifest:
    """A prepared dataset's manifest for ``model`` (prepare_dataset's), with its tokenizer's vocabulary."""
    split = SplitStats(rows=10, dropped_too_long=0, truncated=0, tokens=640, loss_tokens=320)
    return DatasetManifest(
        source="builtin-tasks",
        content_sha256="0" * 64,
        seq_len=seq_len,
        splits={"train": split, "validation": split},
        template="builtin",
        tokenizer_directory="tokenizer",
        vocab_size=vocab_size,
        pad_token_id=0,
        eos_token_id=eos_token_id,
        model=model,
    )


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf")
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def test_materialise_records_the_models_own_shape(hf_dir, tmp_path):
    info = materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", shape(hidden_size=16))
    assert info.kind == "hf_dir" and info.directory == str(hf_dir) and info.pretrained
    assert (info.hidden_size, info.vocab_size, info.tie_word_embeddings) == (16, 40, True)
    assert ModelInfo.read(tmp_path / "model.json") == info


def test_hidden_size_that_disagrees_with_the_model_is_refused(hf_dir, tmp_path):
    with pytest.raises(InputError, match="p.yaml: model.hidden_size: hidden_size 64 but the model has 16"):
        materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", shape(hidden_size=64))
    with pytest.raises(
        InputError, match="p.yaml: model.num_hidden_layers: num_hidden_layers 30 but the model has 1"
    ):
        materialise(
            parse_source(str(hf_dir)), tmp_path, "p.yaml", shape(hidden_size=16, num_hidden_layers=30)
        )
    assert materialise(
        parse_source(str(hf_dir)),
        tmp_path,
        "p.yaml",
        shape(hidden_size=16, num_hidden_layers=1, vocab_size=40, tie_word_embeddings=True),
    )


def test_pretrained_weights_are_loaded_not_reinitialised(hf_dir, tmp_path):
    stated = shape(source=str(hf_dir), hidden_size=16)
    info = materialise(parse_source(str(hf_dir)), tmp_path, "p.yaml", stated)
    tiny = settings("cpu-tiny")
    _, run_spec = rendered(tiny.model_copy(update={"model": stated}))
    model = load_for_training(run_spec, manifest(info, vocab_size=40), {"zero_optimization": {"stage": 0}})
    saved = LlamaForCausalLM.from_pretrained(hf_dir)
    for (name, a), (_, b) in zip(model.state_dict().items(), saved.state_dict().items()):
        assert torch.equal(a, b), name
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied embeddings stay tied


def test_one_model_the_trained_shape_model_is_the_planned_one(tiny_profile, tmp_path):
    """Training builds the shape model with the run spec's vocabulary (dataset.vocab_size, 256), not the
    tokenizer's (167 for the default): the planner counts the same model, so a report has one parameter
    count."""
    from zerogate.model.build import planned_model_config
    from zerogate.model.counts import count_parameters
    from zerogate.model.sources import SHAPE

    tiny = settings(tiny_profile)
    _, run_spec = rendered(tiny)
    assert run_spec.vocab_size == tiny.dataset.vocab_size == 256
    planned = count_parameters(planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len))
    info = materialise(parse_source("shape"), tmp_path, "p.yaml", tiny.model)
    assert info.kind == SHAPE and info.vocab_size is None  # the profile's dataset.vocab_size decides
    trained = load_for_training(run_spec, manifest(info, vocab_size=167), {"zero_optimization": {"stage": 0}})
    assert trained.config.vocab_size == tiny.dataset.vocab_size == planned.vocab
    assert sum(p.numel() for p in trained.parameters()) == planned.total
    assert trained.config.eos_token_id == 2  # the tokenizer's end-of-sequence token


def test_a_shape_with_its_own_vocabulary_records_it_for_the_tokenizer_check(tmp_path):
    info = materialise(parse_source("shape"), tmp_path, "p.yaml", shape(hidden_size=16, vocab_size=100))
    assert info.vocab_size == 100 and not info.pretrained
