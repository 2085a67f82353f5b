"""Headless Chromium (Debian's `chromium` package) for the report tests: load a page, return its DOM."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("ZEROGATE_REQUIRE_CHROMIUM"):
        raise RuntimeError(
            "ZEROGATE_REQUIRE_CHROMIUM is set but no chromium is on PATH (apt-get install chromium)"
        )
    return found


def _run(page: Path, *extra: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="zerogate-chromium-") as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )


def dump_dom(page: Path) -> str:
    """The DOM after the page has loaded (what a reader's browser builds from the file)."""
    done = _run(page, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, png: Path, size: str = "1200,2400") -> None:
    done = _run(page, f"--screenshot={png}", f"--window-size={size}")
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
