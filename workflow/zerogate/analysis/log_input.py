"""The logs the judge_log rule is given (``--config log=PATH`` or ``log=[A,B]``): each checked to be a text
log before anything is written, and each named for its results directory, ``results/logs/<name>/``."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from zerogate.errors import InputError

# A log is text: a NUL byte in its first block, or more undecodable bytes than this share, means it is not.
_SNIFF_BYTES = 65536
_MAX_UNDECODABLE_SHARE = 0.05


def check_log_file(path: str | Path) -> None:
    """InputError naming the file when it is missing, empty or not text."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "", "no such file" if not path.exists() else "not a file")
    data = path.read_bytes()[:_SNIFF_BYTES]
    if not data.strip():
        raise InputError(str(path), "", "empty: no log lines to judge")
    if b"\0" in data:
        raise InputError(str(path), "", "binary (NUL bytes), not a text log")
    undecodable = data.decode("utf-8", errors="replace").count("\ufffd") - data.decode(
        "utf-8", errors="ignore"
    ).count("\ufffd")
    if undecodable > _MAX_UNDECODABLE_SHARE * len(data):
        raise InputError(str(path), "", "not UTF-8 text (mostly undecodable bytes), not a text log")


def read_log_text(path: str | Path) -> str:
    """The log's text, checked first (:func:`check_log_file`); a stray undecodable byte becomes U+FFFD."""
    check_log_file(path)
    return Path(path).read_text(encoding="utf-8", errors="replace")


def result_names(paths: list[str]) -> dict[str, str]:
    """name -> path: each log named after its file's stem; stems that several logs share get the first
    8 hex digits of the sha256 of the resolved path appended, so that a name does not depend on the
    order the logs were given in. The same file given twice is one log."""
    first_given: dict[Path, str] = {}
    for path in paths:
        first_given.setdefault(Path(path).resolve(), str(path))
    unique = list(first_given.values())
    stems = Counter(_stem(p) for p in unique)
    names: dict[str, str] = {}
    for path in unique:
        name = _stem(path)
        if stems[name] > 1:
            name = f"{name}-{hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]}"
        names[name] = path
    return names


def _stem(path: str) -> str:
    """The file name without its suffix, in characters safe for a directory name."""
    stem = Path(path).stem or Path(path).name
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in stem) or "log"


def given_logs(value: str | list[str] | None) -> list[str]:
    """config["log"] as a list: a path, a list of paths, or none (schema: config.schema.json ``log``)."""
    return [value] if isinstance(value, str) else list(value or [])


def rule_inputs(
    logs: dict[str, str], source: str, stop: Callable[[InputError], None]
) -> dict[str, list[str]]:
    """The judge_log rule's inputs, each log checked before any job runs: ``stop`` (common.smk's ``fail``,
    one line and exit) gets the InputError of the first bad log, or of no log at all (``source`` is the
    file or --config that set the ``log`` key)."""
    if not logs:
        stop(InputError(source, "log", "judge_log needs a log: --config log=PATH (or log=[A,B])"))
    for path in logs.values():
        try:
            check_log_file(path)
        except InputError as error:
            stop(error)
    return {"logs": list(logs.values())}
