"""Byte units and how zerogate prints bytes, defined once. Memory is logged in GiB (2**30 bytes); GB
means 10**9 bytes (the unit a claim states is kept as the claim writes it)."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2
GB = 10**9
UNIT_BYTES = {"GB": GB, "GiB": GIB}


def format_bytes(n: float | None) -> str:
    """Bytes in binary and decimal units side by side: '12.34 GiB (13.25 GB)', '1.22 MiB (1.28 MB)';
    a dash for none. Every report, plan, log line and claim verdict prints bytes with this."""
    if n is None or n != n:  # None or NaN
        return "—"
    for binary, decimal, b_unit, d_unit in (
        (GIB, GB, "GiB", "GB"),
        (MIB, 10**6, "MiB", "MB"),
        (1024, 1000, "KiB", "kB"),
    ):
        if abs(n) >= binary:
            return f"{n / binary:.2f} {b_unit} ({n / decimal:.2f} {d_unit})"
    return f"{n:.0f} B"
