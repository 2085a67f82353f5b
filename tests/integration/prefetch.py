"""The heaviest integration fixtures that read nothing a test changes, built in the background.

The tests are mostly one process at a time starting up, which leaves a core. So, from the moment the smoke
run has ended (tests/conftest.py: smoke_run_started), one thread builds these fixtures one after the other,
in the order their test files run (those marked ``last`` after the others: a build that first waits for the
two-node run), while the unit tests and the integration tests before them run. A test module registers its
fixtures' preparations with :func:`prefetched`: each copies what it needs from the smoke run (its probe, its
results for a launch, or the whole run for a test that changes it) and returns the build, which works only in
its own directories. The module's fixture takes the build's result with :func:`result`, which builds it there
and then when it was not started (a test file run alone, the smoke run not selected).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

# A module's preparation: (tmp_path_factory, the smoke run or None) -> the build, called in the background.
Prepare = Callable[[pytest.TempPathFactory, Any], Callable[[], Any]]

# A build's key: (its test module, its preparation's name).
Key = tuple[str, str]
_PREPARED: dict[Key, tuple[Prepare, bool]] = {}
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
_STARTED: dict[Key, Future[Any]] = {}


def prefetched(prepare: Prepare | None = None, *, last: bool = False) -> Any:
    """Register ``prepare`` as a background build of its test module; ``last``: after every other build
    (``@prefetched(last=True)``)."""

    def register(prepare: Prepare) -> Prepare:
        _PREPARED[prepare.__module__, prepare.__name__] = (prepare, last)
        return prepare

    return register if prepare is None else register(prepare)


def start(session: pytest.Session, tmp_path_factory: pytest.TempPathFactory, smoke_run: Any) -> None:
    """Start the builds of the selected test modules, in the order the modules were collected, those marked
    ``last`` after the others. Every preparation runs now (its copies made), each build in turn."""
    selected = {item.module.__name__ for item in session.items if getattr(item, "module", None)}
    ordered = sorted(_PREPARED.items(), key=lambda entry: entry[1][1])  # stable: collection order kept
    for key, (prepare, _) in ordered:
        if key[0] in selected and key not in _STARTED:
            _STARTED[key] = _POOL.submit(prepare(tmp_path_factory, smoke_run))


def result(module: str, prepare: Prepare, tmp_path_factory: pytest.TempPathFactory, smoke_run: Any) -> Any:
    """What ``prepare``'s build (of test module ``module``) returns: the background's, when it was started;
    else built now."""
    started = _STARTED.pop((module, prepare.__name__), None)
    return prepare(tmp_path_factory, smoke_run)() if started is None else started.result()


def stop() -> None:
    """Drop the builds not started yet and wait for the one running (at the session's end)."""
    _POOL.shutdown(wait=True, cancel_futures=True)
