"""Turn one canonical record into token ids with the prompt masked from the loss.

A record is one of: ``{"prompt", "response"}`` (instruction/input/output rows are folded into this
form by data_sources), ``{"messages": [{"role", "content"}, ...]}`` or ``{"text"}``. Formatting is the
model's own chat template (``template: chat``) or a named template below. The prompt and the response
are tokenised separately and concatenated, so the boundary between masked and learned tokens is exact
whatever the tokenizer merges across it.
"""

from __future__ import annotations

from typing import Any, Protocol

IGNORE_INDEX = -100  # label value the causal-LM loss skips

# Named templates: (prompt format, response format). {eos} is appended as a token, not as text.
NAMED_TEMPLATES: dict[str, tuple[str, str]] = {
    # The built-in dataset's own format: its prompt already holds the instruction and input headers.
    "builtin": ("{prompt}", " {response}"),
    # Stanford Alpaca's prompt, the usual one for instruction/input/output data.
    "alpaca": (
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\n{prompt}\n\n### Response:\n",
        "{response}",
    ),
    # Prompt and response on consecutive lines, nothing else.
    "plain": ("{prompt}\n", "{response}"),
}
TEMPLATES = ["chat", *NAMED_TEMPLATES]


class Tokenizer(Protocol):
    """What is needed of a tokenizer: a transformers tokenizer, or :class:`BuiltinTokenizer`."""

    eos_token_id: int

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> str: ...


def encode_text(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def chat_text(tokenizer: Tokenizer, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def prompt_ids(tokenizer: Tokenizer, prompt: str, template: str) -> list[int]:
    """The tokens a model sees before it should answer ``prompt`` (also used for greedy evaluation)."""
    if template == "chat":
        return encode_text(tokenizer, chat_text(tokenizer, [{"role": "user", "content": prompt}], True))
    return encode_text(tokenizer, NAMED_TEMPLATES[template][0].format(prompt=prompt))


def formatted_text(record: dict[str, Any], template: str) -> str:
    """The whole text a named template makes of ``record`` (prompt and response with the template's own
    words): what a tokenizer trained for the dataset must be trained on, so the template's headers are
    learned too rather than split into single characters."""
    if "text" in record:
        return record["text"]
    if "messages" in record:  # chat data needs the model's chat template; no trained tokenizer has one
        return "\n".join(message["content"] for message in record["messages"])
    prompt_format, response_format = NAMED_TEMPLATES[template]
    return prompt_format.format(prompt=record["prompt"]) + response_format.format(response=record["response"])


def encode_record(tokenizer: Tokenizer, record: dict[str, Any], template: str) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` of one record; labels are IGNORE_INDEX on prompt tokens."""
    if "text" in record:  # continued pre-training: every token is learned
        ids = encode_text(tokenizer, record["text"]) + [tokenizer.eos_token_id]
        return ids, list(ids)
    if "messages" in record:
        return _encode_conversation(tokenizer, record["messages"], template)
    prompt = prompt_ids(tokenizer, record["prompt"], template)
    if template == "chat":
        full = chat_text(
            tokenizer,
            [
                {"role": "user", "content": record["prompt"]},
                {"role": "assistant", "content": record["response"]},
            ],
            False,
        )
        head = chat_text(tokenizer, [{"role": "user", "content": record["prompt"]}], True)
        response = encode_text(tokenizer, full[len(head) :]) if full.startswith(head) else []
        if not response:
            raise ValueError("the chat template does not render the prompt as a prefix of the conversation")
    else:
        response = encode_text(tokenizer, NAMED_TEMPLATES[template][1].format(response=record["response"]))
        response.append(tokenizer.eos_token_id)
    return prompt + response, [IGNORE_INDEX] * len(prompt) + response


def _encode_conversation(
    tokenizer: Tokenizer, messages: list[dict[str, str]], template: str
) -> tuple[list[int], list[int]]:
    """A multi-turn chat: only the assistant turns are learned, rendered by the chat template."""
    if template != "chat":
        raise ValueError("chat messages need template: chat")
    ids: list[int] = []
    labels: list[int] = []
    rendered = ""
    for turn in range(len(messages)):
        # Everything up to this turn's end, minus what is already tokenised: one piece per turn.
        upto = chat_text(tokenizer, messages[: turn + 1], False)
        if messages[turn]["role"] == "assistant":
            head = chat_text(tokenizer, messages[:turn], True)
            ids_head = encode_text(tokenizer, head[len(rendered) :])
            ids += ids_head
            labels += [IGNORE_INDEX] * len(ids_head)
            rendered = head
        piece = encode_text(tokenizer, upto[len(rendered) :])
        ids += piece
        labels += piece if messages[turn]["role"] == "assistant" else [IGNORE_INDEX] * len(piece)
        rendered = upto
    return ids, labels
