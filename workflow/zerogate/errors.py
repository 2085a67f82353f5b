"""One error type for bad input, printed as one line that names the file and the key."""

from __future__ import annotations


class InputError(Exception):
    """Bad user input, found before any expensive work starts.

    ``str(error)`` is a single line: ``<file>: <key>: <what is wrong>``.
    """

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")
