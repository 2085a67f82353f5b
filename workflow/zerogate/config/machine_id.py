"""Machine ids used in result paths."""

from __future__ import annotations

import re


def machine_id_from_host(hostname: str) -> str:
    """A path-safe id from a host name: letters, digits, '.', '_' and '-' only."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", hostname.split(".")[0]).strip("-.")
    return cleaned or "localhost"
