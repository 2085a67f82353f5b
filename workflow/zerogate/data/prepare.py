"""Build the profile's dataset (rule prepare_dataset): the built-in tasks or a user's records, split into
train and validation, encoded with the model's tokenizer (or one trained here) in the chosen template, and
written as the token arrays every dataset ends as (zerogate.data.dataset), with held-out items for greedy
evaluation and a manifest whose content hash provenance compares across machines."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from zerogate.config.model_data import DatasetSettings
from zerogate.contracts.data import DatasetManifest, ModelInfo
from zerogate.data.builtin import builtin_record, generate_examples
from zerogate.data.dataset import fit_rows, split_to_table
from zerogate.data.sources import load_table, to_records
from zerogate.data.templates import IGNORE_INDEX, encode_record, formatted_text, prompt_ids
from zerogate.data.tokenizer import (
    check_vocabulary,
    choose_template,
    pretrained_tokenizer,
    tokenizer_and_template,
    trained_tokenizer,
)
from zerogate.errors import InputError


def split_records(records: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(validation, train): a seeded shuffle, at least one row on each side."""
    order = np.random.default_rng(seed).permutation(len(records))
    count = min(max(1, round(fraction * len(records))), len(records) - 1)
    if count < 1:
        raise ValueError("a validation split needs at least two rows")
    return [records[i] for i in order[:count]], [records[i] for i in order[count:]]


Pairs = list[tuple[dict[str, Any], dict[str, Any]]]  # (canonical record, what its held-out item shows)


@dataclass(frozen=True)
class SplitEncoding:
    """How every split of one dataset is encoded: the tokenizer and template, the sequence length and what
    a row longer than it becomes, and where the rows came from (named in errors)."""

    tokenizer: Any
    template: str
    seq_len: int
    too_long: str
    where: str


def builtin_splits(typed: DatasetSettings, model_dir: str | None) -> tuple[Any, str, dict[str, Pairs]]:
    """The built-in tasks' examples as (tokenizer, template, train and validation pairs): the model's own
    tokenizer, or one trained on the train examples as the template formats them."""
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
    return tokenizer, template, splits


def file_splits(
    typed: DatasetSettings, model_dir: str | None, repo: str | Path, manifest: dict[str, Any]
) -> tuple[Any, str, dict[str, Pairs], str]:
    """A file's or hub dataset's records as (tokenizer, template, train and validation pairs, where they
    came from); the file's facts and the rows read go into ``manifest``."""
    table, facts = load_table(typed.source, repo, typed)
    where = str(Path(repo) / typed.source) if "file_sha256" in facts else typed.source
    records = to_records(table, typed.columns or {}, where)
    manifest["file"] = facts
    manifest["rows_read"] = len(records)
    if typed.max_rows:
        records = records[: typed.max_rows]
    if len(records) < 2:
        raise InputError(where, "", f"{len(records)} row: a training and a validation split need at least 2")
    validation, train = split_records(records, typed.validation_fraction, typed.seed)
    tokenizer, template = tokenizer_and_template(typed, model_dir, train, typed.vocab_size)
    splits = {"train": [(r, r) for r in train], "validation": [(r, r) for r in validation]}
    return tokenizer, template, splits, where


def write_split(out: Path, name: str, pairs: Pairs, encoding: SplitEncoding, digest: Any) -> dict[str, Any]:
    """Encode one split, write its token arrays (``<name>.parquet``) and held-out items
    (``<name>_examples.jsonl``: the prompt's tokens and the expected answer, for greedy evaluation), add
    them to the content ``digest``; the split's manifest entry."""
    tokenizer, template, where = encoding.tokenizer, encoding.template, encoding.where
    encoded_rows = []
    for number, (record, _) in enumerate(pairs, start=1):
        try:
            encoded_rows.append(encode_record(tokenizer, record, template))
        except ValueError as error:
            raise InputError(where, f"row {record.get('_row', number)}", str(error)) from None
    numbers = [record.get("_row", n) for n, (record, _) in enumerate(pairs, start=1)]
    encoded = fit_rows(
        encoded_rows, encoding.seq_len, tokenizer.pad_token_id, encoding.too_long, where, numbers
    )
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
        raise InputError(where, "dataset.seq_len", f"no {name} row fits in {encoding.seq_len} tokens")
    return {
        "rows": int(encoded.input_ids.shape[0]),
        "dropped_too_long": encoded.dropped_too_long,
        "truncated": encoded.truncated,
        "tokens": int(encoded.attention_mask.sum()),
        "loss_tokens": int((encoded.labels != IGNORE_INDEX).sum()),
    }


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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_info = model_info or ModelInfo(source="shape", kind="shape", directory=None)
    model_dir = model_info.directory
    manifest: dict[str, Any] = {"source": typed.source, "splits": {}}
    if typed.builtin:
        tokenizer, template, splits = builtin_splits(typed, model_dir)
        where = "builtin-tasks"
    else:
        tokenizer, template, splits, where = file_splits(typed, model_dir, repo, manifest)
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
    encoding = SplitEncoding(tokenizer, template, typed.seq_len, typed.too_long_rows, where)
    for name, pairs in splits.items():
        manifest["splits"][name] = write_split(out, name, pairs, encoding, digest)
    manifest["model"] = model_info
    manifest["template"] = template
    manifest["tokenizer_directory"] = model_dir or str(out / "tokenizer")
    manifest["vocab_size"] = len(tokenizer)
    manifest["pad_token_id"] = tokenizer.pad_token_id
    manifest["eos_token_id"] = tokenizer.eos_token_id
    manifest["seq_len"] = typed.seq_len
    # Content hash over examples, tokenizer, template and token arrays (not file bytes: parquet metadata may
    # vary).
    manifest["content_sha256"] = digest.hexdigest()
    typed_manifest = DatasetManifest.of(manifest, str(out / "manifest.json"))
    typed_manifest.write(out / "manifest.json")
    return typed_manifest
