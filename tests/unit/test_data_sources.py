"""User dataset files: each format read through the column mapping, each bad input refused in one line
that names the file and what is wrong, before any training."""

import json

import pandas as pd
import pytest

from zerogate.config.model_data import dataset_settings
from zerogate.contracts.data import DatasetManifest
from zerogate.data.dataset import load_split
from zerogate.data.prepare import prepare
from zerogate.data.sources import check_dataset_source
from zerogate.data.templates import IGNORE_INDEX
from zerogate.errors import InputError

ROWS = [
    {"question": f"reverse {w}", "answer": w[::-1], "extra": i}
    for i, w in enumerate(["abc", "defg", "hij", "klmno", "pqr", "stuv", "wxy", "zab", "cde", "fgh"])
]


def settings(source, **extra):
    """A profile's ``dataset`` section for ``source``, typed as the profile loads it."""
    return dataset_settings(
        {
            "source": source,
            "columns": {"prompt": "question", "response": "answer"},
            "seq_len": 32,
            "validation_fraction": 0.2,
            "seed": 1,
            "vocab_size": 128,
            "template": "plain",
            **extra,
        }
    )


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(tmp_path, source, **extra) -> str:
    with pytest.raises(InputError) as error:
        prepare(settings(source, **extra), tmp_path / "out", repo=tmp_path)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_local_jsonl_with_column_mapping_builds_masked_splits(tmp_path):
    write_jsonl(tmp_path / "mine.jsonl", ROWS)
    manifest = prepare(settings("mine.jsonl"), tmp_path / "out", repo=tmp_path)
    assert DatasetManifest.read(tmp_path / "out/manifest.json") == manifest
    assert manifest.rows_read == 10
    assert manifest.splits["train"].rows == 8 and manifest.splits["validation"].rows == 2
    assert len(manifest.file["file_sha256"]) == 64 and manifest.template == "plain"
    split = load_split(tmp_path / "out/train.parquet")
    assert ((split.labels != IGNORE_INDEX).sum(axis=1) > 0).all()  # every row learns its answer
    assert ((split.labels == IGNORE_INDEX) | (split.labels == split.input_ids)).all()
    items = [
        json.loads(line) for line in (tmp_path / "out/validation_examples.jsonl").read_text().splitlines()
    ]
    assert {item["answer"] for item in items} <= {r["answer"] for r in ROWS}


def test_content_hash_follows_the_file(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ROWS)
    write_jsonl(tmp_path / "b.jsonl", [{**ROWS[0], "answer": "zzz"}, *ROWS[1:]])
    first = prepare(settings("a.jsonl"), tmp_path / "a", repo=tmp_path)
    again = prepare(settings("a.jsonl"), tmp_path / "a2", repo=tmp_path)
    other = prepare(settings("b.jsonl"), tmp_path / "b", repo=tmp_path)
    assert first.content_sha256 == again.content_sha256 != other.content_sha256


@pytest.mark.parametrize("kind", ["csv", "parquet", "json"])
def test_csv_parquet_and_json_array_read_the_same_rows(tmp_path, kind):
    frame = pd.DataFrame(ROWS)
    path = tmp_path / f"mine.{kind}"
    {
        "csv": lambda: frame.to_csv(path, index=False),
        "parquet": lambda: frame.to_parquet(path),
        "json": lambda: path.write_text(json.dumps(ROWS)),
    }[kind]()
    assert prepare(settings(path.name), tmp_path / "out", repo=tmp_path).rows_read == 10


def test_plain_text_for_continued_pretraining(tmp_path):
    (tmp_path / "book.txt").write_text("".join(f"line number {i} of the book\n" for i in range(20)))
    manifest = prepare(settings("book.txt", columns={"text": "text"}), tmp_path / "out", repo=tmp_path)
    split = load_split(tmp_path / "out/train.parquet")
    learned = split.labels != IGNORE_INDEX
    assert manifest.rows_read == 20 and (learned == (split.attention_mask == 1)).all()


def test_instruction_input_output_layout(tmp_path):
    write_jsonl(
        tmp_path / "alpaca.jsonl",
        [{"instruction": "Reverse.", "input": r["question"], "output": r["answer"]} for r in ROWS],
    )
    columns = {"instruction": "instruction", "input": "input", "output": "output"}
    manifest = prepare(
        settings("alpaca.jsonl", columns=columns, template="alpaca", seq_len=256),
        tmp_path / "a",
        repo=tmp_path,
    )
    assert manifest.rows_read == 10 and manifest.splits["train"].loss_tokens > 0


def test_missing_mapped_column(tmp_path):
    write_jsonl(tmp_path / "mine.jsonl", ROWS)
    message = refused(tmp_path, "mine.jsonl", columns={"prompt": "question", "response": "reply"})
    assert message.startswith(
        f"{tmp_path}/mine.jsonl: mapped column 'reply' (dataset.columns.response) not found"
    )
    assert "question, answer, extra" in message


def test_empty_file(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    assert refused(tmp_path, "empty.jsonl") == f"{tmp_path}/empty.jsonl: empty file (no rows)"


def test_file_of_blank_lines_is_empty_too(tmp_path):
    (tmp_path / "blank.csv").write_text("question,answer\n")
    assert refused(tmp_path, "blank.csv") == f"{tmp_path}/blank.csv: empty file (no rows)"


def test_malformed_jsonl_line_is_numbered(tmp_path):
    lines = (
        [json.dumps(r) for r in ROWS[:3]]
        + ['{"question": "x", "answer": ']
        + [json.dumps(r) for r in ROWS[3:]]
    )
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    message = refused(tmp_path, "bad.jsonl")
    assert message.startswith(f"{tmp_path}/bad.jsonl: line 4: malformed JSON")


def test_rows_longer_than_seq_len_are_refused_by_default(tmp_path):
    write_jsonl(tmp_path / "long.jsonl", [*ROWS, {"question": "reverse " + "a b c d e " * 20, "answer": "x"}])
    message = refused(tmp_path, "long.jsonl", validation_fraction=0.1, seed=3)
    assert message.startswith(f"{tmp_path}/long.jsonl: row 11: ") and "longer than seq_len 32" in message
    assert "dataset.too_long" in message


@pytest.mark.parametrize("policy", ["drop", "truncate"])
def test_too_long_rows_dropped_or_truncated_are_counted(tmp_path, policy):
    long = {"question": "reverse a b", "answer": "a b c d e " * 20}  # the prompt fits, the answer does not
    write_jsonl(tmp_path / "long.jsonl", [*ROWS, *[long] * 10])
    manifest = prepare(
        settings("long.jsonl", too_long=policy, validation_fraction=0.5), tmp_path / "out", repo=tmp_path
    )
    counted = sum(
        getattr(s, "dropped_too_long" if policy == "drop" else "truncated") for s in manifest.splits.values()
    )
    assert counted == 10
    assert sum(s.rows for s in manifest.splits.values()) == (10 if policy == "drop" else 20)


def test_missing_file_and_unknown_type(tmp_path):
    assert refused(tmp_path, "nope.jsonl") == f"{tmp_path}/nope.jsonl: no such dataset file"
    (tmp_path / "data.xyz").write_text("x")
    assert "unknown file type '.xyz'" in refused(tmp_path, "data.xyz")


def test_a_single_row_cannot_be_split(tmp_path):
    write_jsonl(tmp_path / "one.jsonl", ROWS[:1])
    assert "need at least 2" in refused(tmp_path, "one.jsonl")


def test_a_user_file_with_the_default_template_fits_on_a_random_init_model(tmp_path):
    """The BPE tokenizer is trained on the rows' text with the template's own text: without it the Alpaca
    header would tokenise character by character and no row would fit in seq_len."""
    write_jsonl(tmp_path / "mine.jsonl", ROWS * 3)
    manifest = prepare(
        settings("mine.jsonl", template="auto", seq_len=64, vocab_size=256), tmp_path / "out", repo=tmp_path
    )
    assert manifest.template == "alpaca"
    assert manifest.splits["train"].rows == 24 and manifest.splits["train"].dropped_too_long == 0


def test_a_tokenizer_larger_than_the_profiles_vocabulary_is_refused(tmp_path):
    """One model: a shape-only model has dataset.vocab_size entries; a tokenizer that needs more is refused
    (a BPE trainer keeps every character of the text, whatever vocab_size asks)."""
    alphabet = [chr(c) for c in range(0x4E00, 0x4E00 + 90)]  # 90 distinct CJK characters
    rows = [{"question": "".join(alphabet[i::10]), "answer": alphabet[i]} for i in range(10)]
    write_jsonl(tmp_path / "wide.jsonl", rows)
    message = refused(tmp_path, "wide.jsonl", vocab_size=64)
    assert ": dataset.vocab_size: " in message and "64" in message


def test_the_early_check_refuses_the_same_files_when_the_profile_loads(tmp_path):
    """check_dataset_source (run when the profile loads, before any job) refuses what prepare_dataset would,
    with the same message; a good file passes it."""
    write_jsonl(tmp_path / "mine.jsonl", ROWS)
    (tmp_path / "empty.jsonl").write_text("")
    lines = (
        [json.dumps(r) for r in ROWS[:3]]
        + ['{"question": "x", "answer": ']
        + [json.dumps(r) for r in ROWS[3:]]
    )
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    cases = [
        ("nope.jsonl", {}),
        ("empty.jsonl", {}),
        ("bad.jsonl", {}),
        ("mine.jsonl", {"columns": {"prompt": "question", "response": "reply"}}),
    ]
    for source, extra in cases:
        typed = settings(source, **extra)
        with pytest.raises(InputError) as early:
            check_dataset_source(typed.source, typed.columns, typed.format, tmp_path)
        assert str(early.value) == refused(tmp_path, source, **extra), source
    good = settings("mine.jsonl")
    assert check_dataset_source(good.source, good.columns, good.format, tmp_path) is None
    assert check_dataset_source("builtin-tasks", None, None, tmp_path) is None  # nothing to check
