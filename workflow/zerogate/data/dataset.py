"""The token arrays every dataset ends as: prompt tokens masked from the loss, rows padded to the profile's
sequence length, one parquet file per split (zerogate.data.prepare writes them, every rank reads them with
:func:`load_split`). Every machine builds byte-identical arrays from the same profile, so the dataset hash
recorded in provenance can be compared across machines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zerogate.data.templates import IGNORE_INDEX
from zerogate.errors import InputError


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


def split_to_table(split: EncodedSplit) -> pa.Table:
    return pa.table(
        {
            "input_ids": list(split.input_ids),
            "labels": list(split.labels),
            "attention_mask": list(split.attention_mask),
        }
    )


def load_split(path: str | Path) -> EncodedSplit:
    """Read a split written by zerogate.data.prepare back into fixed-width arrays."""
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
