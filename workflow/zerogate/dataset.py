"""The built-in instruction dataset: generated offline with a fixed seed, tokenised with a tokenizer
trained here, prompt tokens masked from the loss, padded to the profile's sequence length.

Every machine builds byte-identical examples and token arrays from the same profile, so the dataset
hash recorded in provenance can be compared across machines.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

IGNORE_INDEX = -100  # label value the causal-LM loss skips (prompt and padding tokens)
SPECIAL_TOKENS = ["<pad>", "<unk>", "<eos>"]
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
    return Example("add", "Add the two numbers.", f"{_spaced(str(a))} + {_spaced(str(b))}", _spaced(str(a + b)))


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


@dataclass
class EncodedSplit:
    input_ids: np.ndarray  # int32 [rows, seq_len]
    labels: np.ndarray  # int32 [rows, seq_len], IGNORE_INDEX on prompt and padding
    attention_mask: np.ndarray  # int8 [rows, seq_len]
    dropped_too_long: int


def encode(examples: list[Example], tokenizer: Tokenizer, seq_len: int) -> EncodedSplit:
    pad_id = tokenizer.token_to_id("<pad>")
    eos_id = tokenizer.token_to_id("<eos>")
    rows_ids, rows_labels, rows_mask = [], [], []
    dropped = 0
    for example in examples:
        prompt_ids = tokenizer.encode(example.prompt()).ids
        response_ids = tokenizer.encode(example.response()).ids + [eos_id]
        ids = prompt_ids + response_ids
        if len(ids) > seq_len:  # never truncate a response: the example would teach a wrong answer
            dropped += 1
            continue
        labels = [IGNORE_INDEX] * len(prompt_ids) + response_ids
        padding = seq_len - len(ids)
        rows_ids.append(ids + [pad_id] * padding)
        rows_labels.append(labels + [IGNORE_INDEX] * padding)
        rows_mask.append([1] * len(ids) + [0] * padding)
    return EncodedSplit(
        input_ids=np.asarray(rows_ids, dtype=np.int32).reshape(-1, seq_len),
        labels=np.asarray(rows_labels, dtype=np.int32).reshape(-1, seq_len),
        attention_mask=np.asarray(rows_mask, dtype=np.int8).reshape(-1, seq_len),
        dropped_too_long=dropped,
    )


def split_to_table(split: EncodedSplit) -> pa.Table:
    return pa.table(
        {
            "input_ids": list(split.input_ids),
            "labels": list(split.labels),
            "attention_mask": list(split.attention_mask),
        }
    )


def load_split(path: str | Path) -> EncodedSplit:
    """Read a split written by :func:`prepare` back into fixed-width arrays."""
    table = pq.read_table(path)
    columns = {name: np.stack(table.column(name).to_numpy(zero_copy_only=False)) for name in table.column_names}
    return EncodedSplit(
        input_ids=columns["input_ids"].astype(np.int64),
        labels=columns["labels"].astype(np.int64),
        attention_mask=columns["attention_mask"].astype(np.int64),
        dropped_too_long=0,
    )


def prepare(settings: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Build the built-in dataset into ``out_dir`` and return its manifest (also written there)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = settings["num_train"] + settings["num_validation"]
    examples = generate_examples(settings["seed"], total, settings["tasks"])
    validation, train = examples[: settings["num_validation"]], examples[settings["num_validation"] :]

    tokenizer = train_tokenizer([e.prompt() + e.response() for e in train], settings["vocab_size"])
    tokenizer_json = tokenizer.to_str()
    (out / "tokenizer.json").write_text(tokenizer_json)

    digest = hashlib.sha256(tokenizer_json.encode())
    manifest: dict[str, Any] = {"source": "builtin-tasks", "settings": settings, "splits": {}}
    for name, rows in (("train", train), ("validation", validation)):
        jsonl = "".join(json.dumps(e.__dict__, sort_keys=True) + "\n" for e in rows)
        (out / f"{name}_examples.jsonl").write_text(jsonl)
        encoded = encode(rows, tokenizer, settings["seq_len"])
        pq.write_table(split_to_table(encoded), out / f"{name}.parquet")
        for blob in (jsonl.encode(), encoded.input_ids.tobytes(), encoded.labels.tobytes()):
            digest.update(blob)
        manifest["splits"][name] = {
            "rows": int(encoded.input_ids.shape[0]),
            "dropped_too_long": encoded.dropped_too_long,
            "tokens": int(encoded.attention_mask.sum()),
            "loss_tokens": int((encoded.labels != IGNORE_INDEX).sum()),
        }
    manifest["vocab_size"] = tokenizer.get_vocab_size()
    manifest["pad_token_id"] = tokenizer.token_to_id("<pad>")
    manifest["eos_token_id"] = tokenizer.token_to_id("<eos>")
    manifest["seq_len"] = settings["seq_len"]
    # Content hash over examples, tokenizer and token arrays (not file bytes: parquet metadata may vary).
    manifest["content_sha256"] = digest.hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
