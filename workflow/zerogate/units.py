"""Byte units and how zerogate prints bytes, defined once. Memory is logged in GiB (2**30 bytes); GB
means 10**9 bytes (the unit a claim states is kept as the claim writes it)."""

from __future__ import annotations

import re

GIB = 1024**3
MIB = 1024**2
GB = 10**9
UNIT_BYTES = {"GB": GB, "GiB": GIB}
# What parse_bytes reads: binary units (KiB..TiB) and decimal ones (kB..TB), case as written here or upper.
SIZE_UNITS = {
    "B": 1,
    "KiB": 1024,
    "MiB": MIB,
    "GiB": GIB,
    "TiB": 1024**4,
    "kB": 1000,
    "KB": 1000,
    "MB": 10**6,
    "GB": GB,
    "TB": 10**12,
}


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


def parse_bytes(text: str | int) -> int:
    """A size as a user writes it ("128GiB", "512 GB", "1.5TiB", or plain bytes) in bytes; ValueError saying
    what is accepted otherwise. "G" alone is refused: GiB and GB differ by 7 %."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"{text!r} is not a positive size")
        return text
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if found is None:
        raise ValueError(f"{text!r} is not a size (a number and a unit, e.g. 128GiB or 512GB)")
    number, unit = found.group(1), found.group(2) or "B"
    if unit not in SIZE_UNITS:
        raise ValueError(f"{text!r}: unit {unit!r} is not one of {', '.join(SIZE_UNITS)}")
    value = round(float(number) * SIZE_UNITS[unit])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value
