"""Helpers for the thin Snakemake entry points in workflow/scripts/ (never imported by stage logic)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def logging_to(log_path: str) -> Iterator[logging.Logger]:
    """Send the stage's logging, warnings and stray prints to the rule's log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        logging.basicConfig(
            stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
        )
        logging.captureWarnings(True)
        yield logging.getLogger("zerogate")


def repo_root(snakemake: Any) -> Path:
    """The repository the running rule's script belongs to (workflow/scripts/ is two levels down). Taken
    from the script's location rather than a rule param: a param holding the absolute path would make a
    moved or renamed checkout rerun every rule that has it."""
    return Path(snakemake.scriptdir).resolve().parents[1]  # scriptdir may read workflow/rules/../scripts


def fail(message: str) -> None:
    print(f"zerogate: error: {message}", file=sys.__stderr__)
    raise SystemExit(1)
