"""The tokenizer a dataset is encoded with and the template its records are formatted in: a pretrained
model's own tokenizer, or a BPE tokenizer trained here on the dataset's own text (random-init models,
deterministic for the same text)."""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from zerogate.config.model_data import DatasetSettings
from zerogate.data.templates import formatted_text
from zerogate.errors import InputError

SPECIAL_TOKENS = ["<pad>", "<unk>", "<eos>"]


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """A BPE tokenizer trained on the dataset's own text (deterministic for the same texts)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    # Newlines are their own token so that a line's last letter is never merged with the next header.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split("\n", behavior="isolated"), pre_tokenizers.Metaspace()]
    )
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def pretrained_tokenizer(model_dir: str) -> Any:
    """A pretrained model's own tokenizer, with a padding token."""
    return _with_padding(AutoTokenizer.from_pretrained(model_dir))


def trained_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A BPE tokenizer trained on ``texts`` (random-init models), as a transformers tokenizer."""
    return _with_padding(
        PreTrainedTokenizerFast(
            tokenizer_object=train_tokenizer(texts, vocab_size),
            eos_token="<eos>",
            pad_token="<pad>",
            unk_token="<unk>",
        )
    )


def _with_padding(tokenizer: Any) -> Any:
    if tokenizer.pad_token_id is None:  # padding is masked from loss and attention: any id will do
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(model_dir: str | None, texts: list[str], vocab_size: int) -> Any:
    """The model's own tokenizer, or (random-init models) a BPE tokenizer trained on ``texts``."""
    return pretrained_tokenizer(model_dir) if model_dir else trained_tokenizer(texts, vocab_size)


def choose_template(settings: DatasetSettings, tokenizer: Any) -> str:
    """The profile's template; ``auto``: the tokenizer's chat template if it has one, else builtin
    (built-in data) or alpaca. ``tokenizer`` None stands for a tokenizer yet to be trained (no chat
    template)."""
    template = settings.template
    if template == "auto":
        if getattr(tokenizer, "chat_template", None):
            return "chat"
        return "builtin" if settings.builtin else "alpaca"
    if template == "chat" and not getattr(tokenizer, "chat_template", None):
        raise InputError(
            "profile", "dataset.template", "chat, but the model's tokenizer has no chat template"
        )
    return template


def tokenizer_and_template(
    settings: DatasetSettings, model_dir: str | None, train_records: list[dict[str, Any]], vocab_size: int
) -> tuple[Any, str]:
    """The tokenizer and the template for the records: a pretrained model's own tokenizer, or a BPE
    tokenizer trained on the train records exactly as the template formats them (trained without the
    template's words, it would split the Alpaca header into single characters)."""
    if model_dir:
        tokenizer = pretrained_tokenizer(model_dir)
        return tokenizer, choose_template(settings, tokenizer)
    template = choose_template(settings, None)
    return trained_tokenizer([formatted_text(r, template) for r in train_records], vocab_size), template


def check_vocabulary(tokenizer: Any, model_vocab_size: int, profile_file: str, key: str) -> None:
    """One model (the planner counts it from the profile): the model's vocabulary must hold every token."""
    if len(tokenizer) > model_vocab_size:
        raise InputError(
            profile_file,
            key,
            f"the tokenizer trained for this dataset has {len(tokenizer)} tokens, more "
            f"than the model's vocabulary of {model_vocab_size} (a BPE tokenizer keeps "
            f"every character of the text): raise {key}",
        )
