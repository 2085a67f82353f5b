"""The heaviest integration fixtures that read nothing a test changes, built in the background.

The tests are mostly one process at a time starting up, which leaves a core. So, from the moment the smoke
run has ended (tests/conftest.py: smoke_run_started), one thread builds these fixtures one after the other,
in the order their test files run, while the unit tests and the integration tests before them run. A test
module registers its fixture's preparation with :func:`prefetched`: it copies what it needs from the smoke
run (its probe, or its results for a launch) and returns the build, which works only in its own
directories. The module's fixture takes the build's result with :func:`result`, which builds it there and
then when it was not started (a test file run alone, the smoke run not selected).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

# A module's preparation: (tmp_path_factory, the smoke run or None) -> the build, called in the background.
Prepare = Callable[[pytest.TempPathFactory, Any], Callable[[], Any]]

_PREPARED: dict[str, Prepare] = {}
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
_STARTED: dict[str, Future[Any]] = {}


def prefetched(prepare: Prepare) -> Prepare:
    """Register ``prepare`` as its test module's background build (one per module)."""
    _PREPARED[prepare.__module__] = prepare
    return prepare


def start(session: pytest.Session, tmp_path_factory: pytest.TempPathFactory, smoke_run: Any) -> None:
    """Start the builds of the selected test modules, in the order the modules were collected."""
    selected = {item.module.__name__ for item in session.items if getattr(item, "module", None)}
    for module, prepare in _PREPARED.items():
        if module in selected and module not in _STARTED:
            _STARTED[module] = _POOL.submit(prepare(tmp_path_factory, smoke_run))


def result(module: str, prepare: Prepare, tmp_path_factory: pytest.TempPathFactory, smoke_run: Any) -> Any:
    """What ``module``'s build returns: the background's, when it was started; else built now."""
    started = _STARTED.pop(module, None)
    return prepare(tmp_path_factory, smoke_run)() if started is None else started.result()


def stop() -> None:
    """Drop the builds not started yet and wait for the one running (at the session's end)."""
    _POOL.shutdown(wait=True, cancel_futures=True)
