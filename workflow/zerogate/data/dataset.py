"""The built-in instruction dataset (generated offline with a fixed seed, tokenised with a tokenizer
trained here), and the token arrays every dataset ends as: prompt tokens masked from the loss, padded
to the profile's sequence length. ``zerogate.prepare`` builds either kind of source into these.

Every machine builds byte-identical examples and token arrays from the same profile, so the dataset
hash recorded in provenance can be compared across machines.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from zerogate.config.model_data import DatasetSettings
from zerogate.contracts.data import DatasetManifest, ModelInfo
from zerogate.data.templates import IGNORE_INDEX, encode_record, formatted_text, prompt_ids
from zerogate.errors import InputError

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
    truncated: int = 0


def fit_rows(
    rows: list[tuple[list[int], list[int]]],
    seq_len: int,
    pad_id: int,
    too_long: str = "drop",
    where: str = "dataset",
    numbers: list[int] | None = None,
) -> EncodedSplit:
    """Pad ``(input_ids, labels)`` rows to ``seq_len``; rows that do not fit are dropped, truncated (the
    response's tail is cut, a row whose prompt alone does not fit is dropped) or refused, as asked."""
    rows_ids, rows_labels, rows_mask = [], [], []
    dropped = truncated = 0
    for index, (ids, labels) in enumerate(rows):
        if len(ids) > seq_len:
            if too_long == "error":
                number = numbers[index] if numbers else index + 1  # the row's number in the file
                raise InputError(
                    where,
                    f"row {number}",
                    f"{len(ids)} tokens, longer than seq_len {seq_len} "
                    f"(set dataset.too_long: drop or truncate)",
                )
            learned_in_window = any(label != IGNORE_INDEX for label in labels[:seq_len])
            if too_long == "drop" or not learned_in_window:
                dropped += 1
                continue
            ids, labels = ids[:seq_len], labels[:seq_len]
            truncated += 1
        padding = seq_len - len(ids)
        rows_ids.append(list(ids) + [pad_id] * padding)
        rows_labels.append(list(labels) + [IGNORE_INDEX] * padding)
        rows_mask.append([1] * len(ids) + [0] * padding)
    return EncodedSplit(
        input_ids=np.asarray(rows_ids, dtype=np.int32).reshape(-1, seq_len),
        labels=np.asarray(rows_labels, dtype=np.int32).reshape(-1, seq_len),
        attention_mask=np.asarray(rows_mask, dtype=np.int8).reshape(-1, seq_len),
        dropped_too_long=dropped,
        truncated=truncated,
    )


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
    columns = {
        name: np.stack(table.column(name).to_numpy(zero_copy_only=False)) for name in table.column_names
    }
    return EncodedSplit(
        input_ids=columns["input_ids"].astype(np.int64),
        labels=columns["labels"].astype(np.int64),
        attention_mask=columns["attention_mask"].astype(np.int64),
        dropped_too_long=0,
    )


def builtin_record(example: Example, template: str) -> dict[str, str]:
    """A built-in example as a canonical record: its own headers for the builtin template, bare otherwise."""
    if template == "builtin":
        return {"prompt": example.prompt(), "response": example.output}
    return {"prompt": f"{example.instruction}\n{example.input}", "response": example.output}


def pretrained_tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return _with_padding(AutoTokenizer.from_pretrained(model_dir))


def trained_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A BPE tokenizer trained on ``texts`` (random-init models), as a transformers tokenizer."""
    from transformers import PreTrainedTokenizerFast

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


def split_records(records: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(validation, train): a seeded shuffle, at least one row on each side."""
    order = np.random.default_rng(seed).permutation(len(records))
    count = min(max(1, round(fraction * len(records))), len(records) - 1)
    if count < 1:
        raise ValueError("a validation split needs at least two rows")
    return [records[i] for i in order[:count]], [records[i] for i in order[count:]]


def prepare(
    typed: DatasetSettings,
    out_dir: str | Path,
    model_info: ModelInfo | None = None,
    repo: str | Path = ".",
    profile_file: str = "profile",
) -> DatasetManifest:
    """Build the profile's dataset into ``out_dir`` and return its manifest (also written there).

    ``typed`` is the profile's ``dataset`` settings; ``model_info`` prepare_model's (None: a shape-only
    model); ``profile_file`` the file that sets them, named in errors."""
    from zerogate.data.sources import load_table, to_records

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_info = model_info or ModelInfo(source="shape", kind="shape", directory=None)
    model_dir = model_info.directory
    seq_len = typed.seq_len
    manifest: dict[str, Any] = {"source": typed.source, "splits": {}}
    if typed.builtin:
        examples = generate_examples(typed.seed, typed.num_train + typed.num_validation, typed.tasks)
        validation_ex, train_ex = examples[: typed.num_validation], examples[typed.num_validation :]
        if model_dir:
            tokenizer = pretrained_tokenizer(model_dir)
            template = choose_template(typed, tokenizer)
        else:
            template = choose_template(typed, None)
            tokenizer = trained_tokenizer(
                [formatted_text(builtin_record(e, template), template) for e in train_ex], typed.vocab_size
            )
        splits = {
            name: [(builtin_record(e, template), e.__dict__) for e in rows]
            for name, rows in (("train", train_ex), ("validation", validation_ex))
        }
        where = "builtin-tasks"
    else:
        table, facts = load_table(typed.source, repo, typed)
        where = str(Path(repo) / typed.source) if "file_sha256" in facts else typed.source
        records = to_records(table, typed.columns or {}, where)
        manifest["file"] = facts
        manifest["rows_read"] = len(records)
        if typed.max_rows:
            records = records[: typed.max_rows]
        if len(records) < 2:
            raise InputError(
                where, "", f"{len(records)} row: a training and a validation split need at least 2"
            )
        validation, train = split_records(records, typed.validation_fraction, typed.seed)
        tokenizer, template = tokenizer_and_template(typed, model_dir, train, typed.vocab_size)
        splits = {"train": [(r, r) for r in train], "validation": [(r, r) for r in validation]}
    too_long = typed.too_long_rows
    if model_dir is None:  # a shape-only model: its vocabulary is the profile's, not the tokenizer's
        stated = model_info.vocab_size
        check_vocabulary(
            tokenizer,
            stated or typed.vocab_size,
            profile_file,
            "model.vocab_size" if stated else "dataset.vocab_size",
        )

    tokenizer_json = tokenizer.backend_tokenizer.to_str()
    (out / "tokenizer.json").write_text(tokenizer_json)
    if model_dir is None:  # the trained tokenizer, loadable by AutoTokenizer for evaluation
        tokenizer.save_pretrained(out / "tokenizer")
    digest = hashlib.sha256(tokenizer_json.encode())
    digest.update(template.encode())
    for name, pairs in splits.items():
        encoded_rows = []
        for number, (record, _) in enumerate(pairs, start=1):
            try:
                encoded_rows.append(encode_record(tokenizer, record, template))
            except ValueError as error:
                raise InputError(where, f"row {record.get('_row', number)}", str(error)) from None
        numbers = [record.get("_row", n) for n, (record, _) in enumerate(pairs, start=1)]
        encoded = fit_rows(encoded_rows, seq_len, tokenizer.pad_token_id, too_long, where, numbers)
        # Held-out items for greedy evaluation: the prompt's tokens and the expected answer.
        lines = []
        for record, original in pairs:
            item = dict(original)
            if "prompt" in record:
                item["prompt_ids"] = prompt_ids(tokenizer, record["prompt"], template)
                item["answer"] = record["response"]
            lines.append(json.dumps(item, sort_keys=True) + "\n")
        jsonl = "".join(lines)
        (out / f"{name}_examples.jsonl").write_text(jsonl)
        pq.write_table(split_to_table(encoded), out / f"{name}.parquet")
        for blob in (jsonl.encode(), encoded.input_ids.tobytes(), encoded.labels.tobytes()):
            digest.update(blob)
        if encoded.input_ids.shape[0] == 0:
            raise InputError(where, "dataset.seq_len", f"no {name} row fits in {seq_len} tokens")
        manifest["splits"][name] = {
            "rows": int(encoded.input_ids.shape[0]),
            "dropped_too_long": encoded.dropped_too_long,
            "truncated": encoded.truncated,
            "tokens": int(encoded.attention_mask.sum()),
            "loss_tokens": int((encoded.labels != IGNORE_INDEX).sum()),
        }
    manifest["model"] = model_info
    manifest["template"] = template
    manifest["tokenizer_directory"] = model_dir or str(out / "tokenizer")
    manifest["vocab_size"] = len(tokenizer)
    manifest["pad_token_id"] = tokenizer.pad_token_id
    manifest["eos_token_id"] = tokenizer.eos_token_id
    manifest["seq_len"] = seq_len
    # Content hash over examples, tokenizer, template and token arrays (not file bytes: parquet metadata may
    # vary).
    manifest["content_sha256"] = digest.hexdigest()
    typed_manifest = DatasetManifest.of(manifest, str(out / "manifest.json"))
    typed_manifest.write(out / "manifest.json")
    return typed_manifest
