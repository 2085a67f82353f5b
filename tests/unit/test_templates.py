"""Prompt formatting and loss masking: exactly the response (and its end token) is learned."""

import pytest

from zerogate.data.templates import IGNORE_INDEX, encode_record, prompt_ids
from zerogate.data.tokenizer import load_tokenizer

CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}<eos>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["<|user|> <|assistant|> hello world reverse the letters a b c d e f\n", "plain text here"] * 20
    tok = load_tokenizer(None, texts, 200)
    tok.chat_template = CHAT
    return tok


def learned(tokenizer, ids, labels):
    return tokenizer.decode([i for i, label in zip(ids, labels) if label != IGNORE_INDEX])


@pytest.mark.parametrize("template", ["builtin", "alpaca", "plain", "chat"])
def test_only_the_response_is_learned(tokenizer, template):
    ids, labels = encode_record(tokenizer, {"prompt": "reverse a b c", "response": "c b a"}, template)
    head = prompt_ids(tokenizer, "reverse a b c", template)
    assert ids[: len(head)] == head and all(label == IGNORE_INDEX for label in labels[: len(head)])
    assert labels[len(head) :] == ids[len(head) :]
    assert " ".join(learned(tokenizer, ids, labels).replace("<eos>", "").split()) == "c b a"
    assert tokenizer.eos_token_id in ids[len(head) :]  # the model learns to stop


def test_text_records_learn_every_token(tokenizer):
    ids, labels = encode_record(tokenizer, {"text": "plain text here"}, "plain")
    assert ids == labels and ids[-1] == tokenizer.eos_token_id


def test_conversation_learns_only_assistant_turns(tokenizer):
    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "world"},
        {"role": "user", "content": "reverse a b"},
        {"role": "assistant", "content": "b a"},
    ]
    ids, labels = encode_record(tokenizer, {"messages": messages}, "chat")
    text = learned(tokenizer, ids, labels)
    assert "world" in text and "b a" in text and "hello" not in text and "reverse" not in text
    assert tokenizer.decode(ids).replace(" ", "") == tokenizer.apply_chat_template(
        messages, tokenize=False
    ).replace(" ", "")


def test_conversation_needs_chat_template(tokenizer):
    with pytest.raises(ValueError, match="template: chat"):
        encode_record(tokenizer, {"messages": [{"role": "user", "content": "x"}]}, "alpaca")
