"""Two result trees compared file by file: is every contract file the same, apart from clock readings and
provenance? The check behind a change that must leave behaviour unchanged (a refactor, a dependency bump):
run the same profiles, with the same seed, before and after, then

    python -m zerogate.bench.result_trees results-before/smoke/vm results-after/smoke/vm

Compared: every JSON, JSON-lines and parquet file (the contracts rules pass to each other) value by value,
and every plain-text table. A value is set aside, not compared, only where :func:`set_aside` says so: a
clock reading (a key or column that names a time, a rate per second or a moment), or provenance (the git
state, package versions, the machine's own figures, when something was recorded), and text under a key
whose values quote clock readings. Everything else (losses, memory, volumes, verdicts, plans, counts) must be
equal. Figures, HTML pages, logs and checkpoints are listed as not compared.

Exit status 1 when a compared value differs or a file is in one tree only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# Words of a key or column (split at anything not a letter or digit, and at camelCase) that make it a clock
# reading: times (seconds, milliseconds), rates per second, bandwidths, latencies, waits, moments.
CLOCK_WORDS = frozenset(
    "time times s ms us seconds elapsed latency latencies bandwidth bandwidths wall duration at date dates"
    " timestamp wait waits throughput sec gbps intervals".split()
)
# Words that make a key provenance: where and when, with which code and packages, a file was made.
PROVENANCE_WORDS = frozenset(
    "git commit dirty packages versions hostname pid recorded registered provenance fingerprint"
    " machine".split()
)
# An object (a gate's verdict) whose unit is a time or a rate, or whose statistic is a time over the floor:
# what it measured, its interval, evidence and verdict all follow the clock; its definition does not.
TIME_UNITS = frozenset({"s", "ms", "tokens/s", "steps/s", "samples/s"})
DEFINITION_KEYS = frozenset(
    {"name", "claim", "definition", "metric", "statistic", "comparison", "threshold", "unit"}
)
# Files that are the machine's own measurements (the probe) or run logs: provenance as a whole.
PROVENANCE_FILES = re.compile(r"(^|/)(probe/|logs/|benchmarks/|\.snakemake)")
# Not contracts: figures, pages, checkpoints, tokenizers, logs.
NOT_COMPARED = re.compile(
    r"\.(png|html|pt|bin|safetensors|log|model|gguf|ckpt)$|(^|/)(checkpoints|tokenizer)/"
)
COMPARED_SUFFIXES = (".json", ".jsonl", ".parquet", ".txt", ".tsv", ".csv", ".md")


def set_aside(path: tuple[str, ...]) -> str | None:
    """Why the value at ``path`` (the keys leading to it) is not compared: "clock", "provenance", or None
    when it must be equal."""
    words = [set(key_words(key)) for key in path]
    if any(w & PROVENANCE_WORDS for w in words):
        return "provenance"
    if any(w & CLOCK_WORDS for w in words):
        return "clock"
    return None


def key_words(key: str) -> list[str]:
    """``"step_time_median(s)"`` -> step, time, median, s; ``"RunningAvgSamplesPerSec"`` -> running, avg,
    samples, per, sec."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [word.lower() for word in re.split(r"[^A-Za-z0-9]+", spaced) if word]


@dataclass
class FileResult:
    """One file's comparison: the differences that count, and the paths set aside (with why)."""

    path: str
    differences: dict[str, str] = field(default_factory=dict)  # value path -> what differs
    set_aside: dict[str, str] = field(default_factory=dict)  # value path -> why it is not compared
    # value path -> |before - after| where both are numbers (None where the values are not two numbers)
    deltas: dict[str, float | None] = field(default_factory=dict)

    def differ(self, where: str, what: str, delta: float | None = None) -> None:
        self.differences.setdefault(where or ".", what)
        self.deltas.setdefault(where or ".", delta)


def _same_number(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare_values(a: Any, b: Any, path: tuple[str, ...], result: FileResult) -> None:
    """Walk two JSON values side by side, recording differences in ``result`` (a path set aside is
    recorded as set aside, once)."""
    reason = set_aside(path)
    if reason is not None:
        if a != b:
            result.set_aside.setdefault("/".join(path), reason)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        timed = a.get("unit") in TIME_UNITS or a.get("statistic") == "floor_ratio"
        if timed and a.get("unit") == b.get("unit"):
            for key in a:
                if key not in DEFINITION_KEYS and a[key] != b.get(key):
                    result.set_aside.setdefault("/".join((*path, str(key))), "clock")
            a = {k: v for k, v in a.items() if k in DEFINITION_KEYS}
            b = {k: v for k, v in b.items() if k in DEFINITION_KEYS}
        if list(a) != list(b):
            result.differ("/".join(path), f"keys {list(a)} != {list(b)}")
        for key in a:
            if key in b:
                compare_values(a[key], b[key], (*path, str(key)), result)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            result.differ("/".join(path), f"{len(a)} items != {len(b)} items")
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            compare_values(x, y, (*path, str(index)), result)
        return
    if not _same_number(a, b):
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
        result.differ("/".join(path), f"{a!r} != {b!r}", abs(a - b) if numbers else None)


def _json_lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, result: FileResult) -> None:
    """Two tables column by column: the same columns in the same order, each compared column equal."""
    if list(a.columns) != list(b.columns):
        result.differ("(columns)", f"{list(a.columns)} != {list(b.columns)}")
    if len(a) != len(b):
        result.differ("(rows)", f"{len(a)} != {len(b)}")
        return
    for column in a.columns:
        if column not in b.columns:
            continue
        reason = set_aside((str(column),))
        left, right = a[column].reset_index(drop=True), b[column].reset_index(drop=True)
        if left.equals(right):
            continue
        if reason is not None:
            result.set_aside[str(column)] = reason
            continue
        values = [(i, x, y) for i, (x, y) in enumerate(zip(left, right, strict=True)) if not _same_cell(x, y)]
        if values:
            i, x, y = values[0]
            result.differ(f"column {column}", f"{len(values)} rows differ, first row {i}: {x!r} != {y!r}")


def _same_cell(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return _same_number(x, y)
    try:
        return bool(pd.isna(x) and pd.isna(y)) or bool(x == y)
    except (TypeError, ValueError):
        return json.dumps(x, default=str) == json.dumps(y, default=str)


def compare_file(before: Path, after: Path, name: str) -> FileResult:
    result = FileResult(name)
    if PROVENANCE_FILES.search(name):
        if before.read_bytes() != after.read_bytes():
            result.set_aside["(whole file)"] = "provenance"
        return result
    suffix = before.suffix
    if suffix == ".json":
        compare_values(json.loads(before.read_text()), json.loads(after.read_text()), (), result)
    elif suffix == ".jsonl":
        compare_values(_json_lines(before), _json_lines(after), (), result)
    elif suffix == ".parquet":
        compare_frames(pd.read_parquet(before), pd.read_parquet(after), result)
    elif before.read_text() != after.read_text():
        before_lines, after_lines = before.read_text().splitlines(), after.read_text().splitlines()
        for number, (x, y) in enumerate(zip(before_lines, after_lines, strict=False), 1):
            if x != y:
                result.differ(f"line {number}", f"{x!r} != {y!r}")
        if len(before_lines) != len(after_lines):
            result.differ("(lines)", f"{len(before_lines)} != {len(after_lines)}")
    return result


def tree_files(root: Path) -> Iterator[str]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root))


@dataclass
class TreeComparison:
    """Two trees: each compared file's result, the files in one tree only, the files not compared."""

    compared: list[FileResult]
    only_before: list[str]
    only_after: list[str]
    not_compared: list[str]

    @property
    def same(self) -> bool:
        return not (self.only_before or self.only_after or any(r.differences for r in self.compared))


NOISE = "varies between two runs of the same code"


def field_of(where: str) -> str:
    """A value's path with its list positions left out: ``12/memory/rss(GiB)`` -> ``*/memory/rss(GiB)``."""
    return "/".join("*" if part.isdigit() else part for part in where.split("/"))


def variation(result: FileResult) -> dict[str, float | None]:
    """How much each field of a file varied between two runs of the same code: the largest difference of
    its numbers at any position (``12/memory/rss(GiB)`` and ``13/...`` are one field), None where a
    non-number varied (any change of it then counts as that variation)."""
    spread: dict[str, float | None] = {}
    for where in [*result.differences, *result.set_aside]:
        name, delta = field_of(where), result.deltas.get(where)
        if delta is None or spread.get(name, 0.0) is None:
            spread[name] = None
        else:
            spread[name] = max(spread.get(name, 0.0), delta)
    return spread


def within(delta: float | None, spread: float | None) -> bool:
    """Whether a difference lies within a field's variation between two runs of the same code: a number
    no further than the largest difference seen; anything where a non-number varied."""
    return spread is None or (delta is not None and delta <= spread)


def compare_trees(before: Path, after: Path, noise: Path | None = None) -> TreeComparison:
    """``noise``: a second run of ``before``'s code (same profiles, same seed); a value that differs between
    ``before`` and it varies from run to run (a clock reading, the resident set) and is set aside."""
    left, right = set(tree_files(before)), set(tree_files(after))
    varying = {}
    if noise is not None:
        varying = {r.path: variation(r) for r in compare_trees(before, noise).compared}
    compared, not_compared = [], []
    for name in sorted(left & right):
        if NOT_COMPARED.search(name) or not name.endswith(COMPARED_SUFFIXES):
            not_compared.append(name)
            continue
        result = compare_file(before / name, after / name, name)
        spreads = varying.get(name, {})
        for where in [w for w in result.differences if field_of(w) in spreads]:
            if within(result.deltas.get(where), spreads[field_of(where)]):
                del result.differences[where]
                result.set_aside[where] = NOISE
        compared.append(result)
    return TreeComparison(
        compared=compared,
        only_before=sorted(n for n in left - right if not NOT_COMPARED.search(n)),
        only_after=sorted(n for n in right - left if not NOT_COMPARED.search(n)),
        not_compared=not_compared,
    )


def report(comparison: TreeComparison, limit: int = 20) -> str:
    lines = []
    identical = [r for r in comparison.compared if not r.differences and not r.set_aside]
    aside = [r for r in comparison.compared if not r.differences and r.set_aside]
    differing = [r for r in comparison.compared if r.differences]
    lines.append(
        f"{len(comparison.compared)} files compared: {len(identical)} identical, {len(aside)} equal but for "
        f"values set aside, {len(differing)} differing; {len(comparison.not_compared)} not compared "
        "(figures, pages, logs, checkpoints)"
    )
    for r in differing:
        lines.append(f"DIFFERS {r.path}")
        lines.extend(f"    {where}: {what}" for where, what in list(r.differences.items())[:limit])
        if len(r.differences) > limit:
            lines.append(f"    ... {len(r.differences) - limit} more")
    for name in comparison.only_before:
        lines.append(f"ONLY BEFORE {name}")
    for name in comparison.only_after:
        lines.append(f"ONLY AFTER {name}")
    for r in aside:
        kinds = sorted({reason.split(" ")[0] for reason in r.set_aside.values()})
        keys = sorted(r.set_aside)
        shown = ", ".join(keys[:8]) + (f", ... {len(keys) - 8} more" if len(keys) > 8 else "")
        lines.append(f"set aside ({'/'.join(kinds)}) {r.path}: {shown}")
    lines.append("SAME" if comparison.same else "NOT THE SAME")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zerogate.bench.result_trees", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument(
        "--noise", type=Path, help="a second run of BEFORE's code: what differs between the two is set aside"
    )
    args = parser.parse_args(argv)
    comparison = compare_trees(args.before, args.after, args.noise)
    print(report(comparison))
    return 0 if comparison.same else 1


if __name__ == "__main__":
    sys.exit(main())
