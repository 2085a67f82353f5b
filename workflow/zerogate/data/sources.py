"""User datasets: local JSONL/JSON/Parquet/CSV/plain-text files, or hub datasets by name when online,
read with Hugging Face ``datasets`` and mapped to canonical records by the profile's column mapping.

    dataset.columns: {instruction: COL, input: COL, output: COL}   (input optional)
                     {prompt: COL, response: COL}
                     {messages: COL}                                (a list of {role, content})
                     {text: COL}                                    (continued pre-training)

Every problem is an InputError naming the file and what is wrong, raised before any tokenisation.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path
from typing import Any

from zerogate.config.model_data import DatasetSettings
from zerogate.errors import InputError
from zerogate.hashing import sha256_file
from zerogate.model.sources import HUB_PREFIX, hub_reachable

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}
LAYOUTS: dict[str, tuple[set[str], set[str]]] = {  # layout: (required roles, optional roles)
    "instruction": ({"instruction", "output"}, {"input"}),
    "prompt_response": ({"prompt", "response"}, set()),
    "messages": ({"messages"}, set()),
    "text": ({"text"}, set()),
}


def layout_of(columns: dict[str, str], where: str) -> str:
    """Which layout a column mapping describes; refuses a mapping that fits none."""
    roles = set(columns)
    for layout, (required, optional) in LAYOUTS.items():
        if required <= roles <= required | optional:
            return layout
    raise InputError(
        where,
        "dataset.columns",
        f"roles {sorted(roles)} fit no layout (use instruction/input/output, prompt/response, "
        f"messages or text)",
    )


def file_format(path: Path, declared: str | None) -> str:
    if declared:
        return declared
    if path.suffix not in FORMATS:
        raise InputError(
            str(path),
            "",
            f"unknown file type '{path.suffix}' (known: {', '.join(FORMATS)}; or set dataset.format)",
        )
    return FORMATS[path.suffix]


def check_jsonl(path: Path) -> None:
    """One JSON object per line: names the first bad line (``datasets`` would only say 'parse error')."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(
                    str(path), f"line {number}", f"malformed JSON ({error.msg} at column {error.colno})"
                ) from None
            if not isinstance(value, dict):
                raise InputError(
                    str(path), f"line {number}", f"expected a JSON object, got {type(value).__name__}"
                )


def file_columns(path: Path, kind: str) -> list[str]:
    """The columns a local file offers, read cheaply (JSON lines: the keys of every object; parquet: its
    schema; CSV: its header; plain text: the one column ``text``)."""
    if kind == "json":
        keys: dict[str, None] = {}
        text = path.read_text(encoding="utf-8")
        if text.lstrip()[:1] == "[":  # one JSON array of objects
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as error:
                raise InputError(
                    str(path), f"line {error.lineno}", f"malformed JSON ({error.msg} at column {error.colno})"
                ) from None
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict):
                keys.update(dict.fromkeys(row))
        return list(keys)
    if kind == "parquet":
        # Here, not at the top: the Snakefile imports this module to check profiles (check_dataset_source).
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception as error:  # pyarrow's ArrowInvalid and friends: not a parquet file
            raise InputError(str(path), "", f"cannot read as parquet: {str(error).splitlines()[0]}") from None
    if kind == "csv":
        with path.open(encoding="utf-8", newline="") as handle:
            return next(csv.reader(handle), [])
    return ["text"]


def check_dataset_source(
    source: str, columns: dict[str, str] | None, declared_format: str | None, repo: str | Path
) -> None:
    """What can be checked of a local dataset file without reading it into a table: it exists, is not
    empty, its type is known, JSON lines parse (naming the first bad line) and the mapped columns exist.
    Run when the profile loads, before any job; whether a row fits in ``seq_len`` tokens needs the
    tokenizer, so prepare_dataset checks that. Built-in tasks and hub datasets have no file to check."""
    if source == "builtin-tasks" or source.startswith(HUB_PREFIX):
        return
    path = Path(repo) / source
    if not path.is_file():
        raise InputError(str(path), "", "no such dataset file")
    if path.stat().st_size == 0:
        raise InputError(str(path), "", "empty file (no rows)")
    kind = file_format(path, declared_format)
    if path.suffix == ".jsonl" or (kind == "json" and path.read_text(encoding="utf-8").lstrip()[:1] == "{"):
        check_jsonl(path)
    layout_of(columns or {}, str(path))
    offered = file_columns(path, kind)
    missing = [
        f"'{column}' (dataset.columns.{role})"
        for role, column in (columns or {}).items()
        if column not in offered
    ]
    if missing:
        raise InputError(
            str(path),
            "",
            f"mapped column {', '.join(missing)} not found; the file has: "
            f"{', '.join(offered) or 'no columns'}",
        )


def load_table(source: str, repo: str | Path, settings: DatasetSettings) -> tuple[Any, dict[str, Any]]:
    """The rows of ``source`` as a ``datasets.Dataset``, and facts about the file for the manifest."""
    # Here, not at the top: the Snakefile imports this module to check profiles (check_dataset_source).
    import datasets

    datasets.disable_progress_bars()
    if source.startswith(HUB_PREFIX):
        name = source[len(HUB_PREFIX) :]
        if not hub_reachable():
            raise InputError(
                name,
                "dataset.source",
                "hub dataset requested but the hub cannot be reached "
                "(offline); download it elsewhere and point dataset.source at the file",
            )
        table = datasets.load_dataset(name, settings.subset, split=settings.split or "train")
        return table, {
            "source": source,
            "revision": getattr(table.info, "version", None) and str(table.info.version),
        }

    path = Path(repo) / source
    if not path.is_file():
        raise InputError(str(path), "", "no such dataset file")
    if path.stat().st_size == 0:
        raise InputError(str(path), "", "empty file (no rows)")
    kind = file_format(path, settings.format)
    if path.suffix == ".jsonl" or (kind == "json" and path.read_text(encoding="utf-8").lstrip()[:1] == "{"):
        check_jsonl(path)
    # A private cache per call: nothing shared across runs, nothing written outside the results.
    with tempfile.TemporaryDirectory(prefix="zerogate-datasets-") as cache:
        try:
            table = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=cache)
            table = datasets.Dataset.from_list(table.to_list()) if len(table) else table
        except Exception as error:  # datasets wraps parser errors in several types; report its first line
            if "corresponds to no data" in str(error):  # a header without rows
                raise InputError(str(path), "", "empty file (no rows)") from None
            raise InputError(str(path), "", f"cannot read as {kind}: {str(error).splitlines()[0]}") from None
    if len(table) == 0:
        raise InputError(str(path), "", "empty file (no rows)")
    return table, {"source": str(source), "file_sha256": sha256_file(path), "format": kind}


def to_records(table: Any, columns: dict[str, str], where: str) -> list[dict[str, Any]]:
    """Canonical records (prompt/response, messages or text) from mapped columns; ``_row`` is the row's
    number in the file (its line for JSONL without blank lines), for error messages."""
    layout = layout_of(columns, where)
    missing = [
        f"'{column}' (dataset.columns.{role})"
        for role, column in columns.items()
        if column not in table.column_names
    ]
    if missing:
        raise InputError(
            where,
            "",
            f"mapped column {', '.join(missing)} not found; the file has: {', '.join(table.column_names)}",
        )
    records: list[dict[str, Any]] = []
    for number, row in enumerate(table, start=1):
        if layout == "instruction":
            extra = row.get(columns["input"], "") if "input" in columns else ""
            prompt = (
                f"{row[columns['instruction']]}\n\n{extra}" if extra else str(row[columns["instruction"]])
            )
            records.append({"prompt": prompt, "response": str(row[columns["output"]]), "_row": number})
        elif layout == "prompt_response":
            records.append(
                {
                    "prompt": str(row[columns["prompt"]]),
                    "response": str(row[columns["response"]]),
                    "_row": number,
                }
            )
        elif layout == "messages":
            messages = row[columns["messages"]]
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and {"role", "content"} <= set(m) for m in messages
            ):
                raise InputError(
                    where,
                    f"row {number}",
                    f"column '{columns['messages']}' is not a list of {{role, content}}",
                )
            records.append(
                {"messages": [{"role": m["role"], "content": m["content"]} for m in messages], "_row": number}
            )
        else:
            records.append({"text": str(row[columns["text"]]), "_row": number})
    return records
