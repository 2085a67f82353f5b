"""The built-in instruction dataset: examples of a few letter and number tasks, generated offline with a
fixed seed, so every machine builds byte-identical examples from the same profile."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tokenizers import Tokenizer

from zerogate.data.dataset import EncodedSplit, fit_rows
from zerogate.data.templates import IGNORE_INDEX

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Example:
    task: str
    instruction: str
    input: str
    output: str

    def prompt(self) -> str:
        return f"### Instruction: {self.instruction}\n### Input: {self.input}\n### Response:"

    def response(self) -> str:
        return f" {self.output}"


def _spaced(chars: str) -> str:
    # One character per word, so each letter or digit becomes one token and the tasks are learnable
    # by a small model (BPE would otherwise merge random letter strings into arbitrary pieces).
    return " ".join(chars)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 8)))


def _reverse(rng: random.Random) -> Example:
    w = _word(rng)
    return Example("reverse", "Reverse the letters.", _spaced(w), _spaced(w[::-1]))


def _sort(rng: random.Random) -> Example:
    w = _word(rng)
    return Example("sort", "Sort the letters alphabetically.", _spaced(w), _spaced("".join(sorted(w))))


def _add(rng: random.Random) -> Example:
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return Example(
        "add", "Add the two numbers.", f"{_spaced(str(a))} + {_spaced(str(b))}", _spaced(str(a + b))
    )


def _length(rng: random.Random) -> Example:
    w = _word(rng)
    return Example("length", "Count the letters.", _spaced(w), _spaced(str(len(w))))


def _repeat(rng: random.Random) -> Example:
    w = _word(rng)
    return Example("repeat", "Repeat the letters twice.", _spaced(w), _spaced(w + w))


TASKS: dict[str, Callable[[random.Random], Example]] = {
    "reverse": _reverse,
    "sort": _sort,
    "add": _add,
    "length": _length,
    "repeat": _repeat,
}


def generate_examples(seed: int, count: int, tasks: list[str]) -> list[Example]:
    """``count`` distinct examples, tasks drawn uniformly; identical for the same arguments."""
    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    examples: list[Example] = []
    attempts = 0
    while len(examples) < count:
        attempts += 1
        if attempts > 20 * count:
            raise ValueError(f"cannot generate {count} distinct examples from tasks {tasks}")
        example = TASKS[rng.choice(tasks)](rng)
        key = (example.instruction, example.input)
        if key in seen:  # keeps validation items unseen in training
            continue
        seen.add(key)
        examples.append(example)
    return examples


def encode(examples: list[Example], tokenizer: Tokenizer, seq_len: int) -> EncodedSplit:
    """The built-in examples with the built-in tokenizer; a too-long example is dropped, never truncated
    (a truncated response would teach a wrong answer)."""
    eos_id = tokenizer.token_to_id("<eos>")
    rows = []
    for example in examples:
        prompt_ids = tokenizer.encode(example.prompt()).ids
        response_ids = tokenizer.encode(example.response()).ids + [eos_id]
        rows.append((prompt_ids + response_ids, [IGNORE_INDEX] * len(prompt_ids) + response_ids))
    return fit_rows(rows, seq_len, tokenizer.token_to_id("<pad>"))


def builtin_record(example: Example, template: str) -> dict[str, str]:
    """A built-in example as a canonical record: its own headers for the builtin template, bare otherwise."""
    if template == "builtin":
        return {"prompt": example.prompt(), "response": example.output}
    return {"prompt": f"{example.instruction}\n{example.input}", "response": example.output}
