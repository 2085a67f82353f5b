"""Evaluation: validation loss over learned tokens only, exact match of greedy answers, equal work per
rank."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from zerogate.config.training import EvaluationSettings
from zerogate.contracts.data import DatasetManifest, ModelInfo, SplitStats
from zerogate.data.dataset import fit_rows
from zerogate.data.templates import IGNORE_INDEX
from zerogate.train.evaluate import Evaluator, exact_match, rank_share, settings_for, validation_loss


def manifest(source: str) -> DatasetManifest:
    """prepare_dataset's manifest of a dataset from ``source`` (built-in tasks or a user file)."""
    split = SplitStats(rows=10, dropped_too_long=0, truncated=0, tokens=640, loss_tokens=320)
    return DatasetManifest(
        source=source,
        content_sha256="0" * 64,
        seq_len=64,
        splits={"train": split, "validation": split},
        template="builtin",
        tokenizer_directory="tokenizer",
        vocab_size=167,
        pad_token_id=0,
        eos_token_id=2,
        model=ModelInfo(source="shape", kind="shape", directory=None),
    )


def test_every_rank_gets_the_same_number_of_rows():
    shares = [rank_share(11, 2, rank) for rank in (0, 1)]
    assert [len(s) for s in shares] == [5, 5] and set(shares[0]).isdisjoint(shares[1])


def test_settings_default_to_four_evaluations_and_no_exact_match_for_user_data():
    assert settings_for(manifest("builtin-tasks"), EvaluationSettings(), 100).every_steps == 25
    assert settings_for(manifest("builtin-tasks"), EvaluationSettings(every_steps=7), 100).every_steps == 7
    assert (
        settings_for(manifest("builtin-tasks"), EvaluationSettings(exact_match_items=5), 8).exact_match_items
        == 5
    )
    assert (
        settings_for(manifest("mine.jsonl"), EvaluationSettings(exact_match_items=5), 8).exact_match_items
        == 0
    )


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    return LlamaForCausalLM(config).eval()


def test_validation_loss_is_the_mean_over_learned_tokens(tiny_model):
    rows = [([1, 2, 3, 4, 5], [IGNORE_INDEX, IGNORE_INDEX, 3, 4, 5]), ([6, 7, 8], [IGNORE_INDEX, 7, 8])]
    split = fit_rows(rows, 8, 0)
    result = validation_loss(tiny_model, split, 10, 1, 0, torch.device("cpu"))
    # By hand: token-weighted mean of each row's own loss.
    losses, counts = [], []
    for ids, labels, mask in zip(split.input_ids, split.labels, split.attention_mask):
        out = tiny_model(
            input_ids=torch.tensor([ids]).long(),
            attention_mask=torch.tensor([mask]).long(),
            labels=torch.tensor([labels]).long(),
        )
        n = int((np.asarray(labels[1:]) != IGNORE_INDEX).sum())
        losses.append(float(out.loss) * n)
        counts.append(n)
    assert result["validation/tokens"] == 5 and result["validation/rows"] == 2
    assert result["validation/loss"] == pytest.approx(sum(losses) / sum(counts), rel=1e-5)


class FakeTokenizer:
    eos_token_id, pad_token_id = 0, 0

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids if int(i) != 0)


class EchoModel:
    """Answers each prompt with the prompt's last two tokens (right for 'repeat', wrong elsewhere)."""

    def generate(self, input_ids, **kwargs):
        return torch.cat([input_ids, input_ids[:, -2:], torch.zeros((1, 1), dtype=input_ids.dtype)], dim=1)


def test_exact_match_counts_correct_greedy_answers_per_task():
    items = [
        {"prompt_ids": [5, 6, 7], "answer": "6 7", "task": "repeat"},
        {"prompt_ids": [5, 6, 8], "answer": "6  8", "task": "repeat"},  # whitespace is normalised
        {"prompt_ids": [5, 6, 9], "answer": "9 6", "task": "reverse"},
    ]
    result = exact_match(EchoModel(), FakeTokenizer(), items, 1, 0, torch.device("cpu"), 4, False)
    assert result["exact_match/correct"] == 2 and result["exact_match/items"] == 3
    assert result["exact_match/by_task"] == {"repeat": [2, 2], "reverse": [0, 1]}
    assert result["exact_match/accuracy"] == pytest.approx(2 / 3)


def test_evaluator_schedule():
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.settings = EvaluationSettings(every_steps=10)
    evaluator.run = lambda step, phase: (step, phase)
    assert evaluator.maybe_run(0) == (0, "before")
    assert evaluator.maybe_run(10) == (10, "during") and evaluator.maybe_run(7) is None
