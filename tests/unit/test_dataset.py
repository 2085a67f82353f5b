"""The built-in dataset: deterministic from its seed, correct answers, prompts masked, splits disjoint."""

import json

import numpy as np
import pytest

from zerogate.config.model_data import dataset_settings
from zerogate.contracts.data import DatasetManifest
from zerogate.data.builtin import TASKS, encode, generate_examples
from zerogate.data.dataset import load_split
from zerogate.data.prepare import prepare
from zerogate.data.templates import IGNORE_INDEX
from zerogate.data.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def settings():
    """A profile's ``dataset`` section for the built-in tasks, typed as the profile loads it."""
    return dataset_settings(
        {
            "source": "builtin-tasks",
            "tasks": list(TASKS),
            "seed": 7,
            "num_train": 300,
            "num_validation": 40,
            "seq_len": 64,
            "vocab_size": 256,
        }
    )


def test_same_settings_give_identical_dataset(tmp_path, settings):
    first = prepare(settings, tmp_path / "a")
    second = prepare(settings, tmp_path / "b")
    assert first.content_sha256 == second.content_sha256
    assert (tmp_path / "a/tokenizer.json").read_bytes() == (tmp_path / "b/tokenizer.json").read_bytes()


def test_another_seed_gives_another_hash(tmp_path, settings):
    other = settings.model_copy(update={"seed": 8})
    assert prepare(settings, tmp_path / "a").content_sha256 != prepare(other, tmp_path / "b").content_sha256


def test_examples_are_correct_answers():
    for example in generate_examples(3, 200, list(TASKS)):
        letters = example.input.replace(" ", "")
        answer = example.output.replace(" ", "")
        if example.task == "reverse":
            assert answer == letters[::-1]
        elif example.task == "sort":
            assert answer == "".join(sorted(letters))
        elif example.task == "add":
            a, b = letters.split("+")
            assert int(answer) == int(a) + int(b)
        elif example.task == "length":
            assert int(answer) == len(letters)
        elif example.task == "repeat":
            assert answer == letters * 2


def test_validation_items_never_appear_in_training(tmp_path, settings):
    prepare(settings, tmp_path)

    def read(name):
        return {
            (r["instruction"], r["input"])
            for r in map(json.loads, (tmp_path / name).read_text().splitlines())
        }

    assert read("train_examples.jsonl").isdisjoint(read("validation_examples.jsonl"))


def test_prompt_tokens_are_masked_and_response_is_learned():
    examples = generate_examples(1, 20, ["reverse"])
    tokenizer = train_tokenizer([e.prompt() + e.response() for e in examples], 256)
    split = encode(examples, tokenizer, 64)
    eos = tokenizer.token_to_id("<eos>")
    for example, ids, labels, mask in zip(examples, split.input_ids, split.labels, split.attention_mask):
        n_prompt = len(tokenizer.encode(example.prompt()).ids)
        n_total = int(mask.sum())
        assert (labels[:n_prompt] == IGNORE_INDEX).all()
        assert (labels[n_prompt:n_total] == ids[n_prompt:n_total]).all()
        assert labels[n_total - 1] == eos
        assert (labels[n_total:] == IGNORE_INDEX).all() and (mask[n_total:] == 0).all()
        assert tokenizer.decode(list(ids[n_prompt : n_total - 1])).strip() == example.output


def test_too_long_examples_are_dropped_and_counted():
    examples = generate_examples(1, 30, ["repeat"])
    tokenizer = train_tokenizer([e.prompt() + e.response() for e in examples], 256)
    lengths = [len(tokenizer.encode(e.prompt() + e.response()).ids) + 1 for e in examples]
    limit = sorted(lengths)[len(lengths) // 2]
    split = encode(examples, tokenizer, limit)
    assert split.dropped_too_long == sum(length > limit for length in lengths)
    assert split.input_ids.shape == (30 - split.dropped_too_long, limit)


def test_written_split_reads_back(tmp_path, settings):
    manifest = prepare(settings, tmp_path)
    assert DatasetManifest.read(tmp_path / "manifest.json") == manifest
    assert manifest.seq_len == settings.seq_len and manifest.builtin and not manifest.model.pretrained
    split = load_split(tmp_path / "train.parquet")
    assert split.input_ids.shape == (manifest.splits["train"].rows, settings.seq_len)
    assert int((split.labels != IGNORE_INDEX).sum()) == manifest.splits["train"].loss_tokens
    assert split.input_ids.max() < manifest.vocab_size
    assert np.issubdtype(split.input_ids.dtype, np.integer)
