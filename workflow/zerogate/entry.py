"""Helpers for the thin Snakemake entry points in workflow/scripts/."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def logging_to(log_path: str) -> Iterator[logging.Logger]:
    """Send the stage's logging, warnings and stray prints to the rule's log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
        logging.captureWarnings(True)
        yield logging.getLogger("zerogate")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_json(path: str | Path, value: Any) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def fail(message: str) -> None:
    print(f"zerogate: error: {message}", file=sys.__stderr__)
    raise SystemExit(1)
