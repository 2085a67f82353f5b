"""The communication table: measured volume per scheme and accumulation against zerogate.predict.comms'
theory.

Input: the per-rank records of zerogate.train.comms_volume (``<scheme>/g<accumulation>/rank<r>.json``).
Per scheme, accumulation and rank, per optimizer step after warm-up: calls and bytes per collective kind.
Measured records go through the same definition as the theory (zerogate.predict.comms.logged_tensor_bytes and
volume_bytes); the theory comes from the run's own parameter count (the records carry
zerogate.model.counts.count_parameters' ModelCounts, the planner's count). A record name with no volume
definition is shown under its own name with its calls and logged bytes, and the rank's total is marked
incomplete: it is never counted as zero. A scheme that did not run is a row with its reason; a rank
without a record is listed as missing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zerogate.contracts.comms import CommsRecord, CommsVolume, LoggedCalls
from zerogate.predict.comms import (
    DDP,
    SCHEMES,
    VOLUME_FACTOR,
    logged_kind,
    logged_tensor_bytes,
    per_optimizer_step,
    ring_factor,
    theory,
    volume_bytes,
)

TOLERANCE = 0.05  # measured within +-5 % of the theory; a larger difference is flagged, never absorbed
CLAIM_SCHEME = "zero3"  # the seed's statement compares ZeRO-3 with plain data parallelism
BASELINE_SCHEME = DDP

DEFINITION = (
    "Volume: a rank's share of one collective on a full tensor of S bytes among N ranks (ZeRO paper, "
    "section 7): all-reduce 2 S (N-1)/N; all-gather and reduce-scatter S (N-1)/N (S the full tensor); "
    "broadcast and reduce S (N-1)/N; barrier 0. The ring factor (N-1)/N is applied the same way to the "
    "theory and to the measured records; per optimizer step after warm-up."
)

_RECORD_FILE = re.compile(r"^(?P<scheme>[^/]+)/g(?P<accumulation>\d+)/rank(?P<rank>\d+)\.json$")


def load_records(directory: str | Path) -> list[CommsRecord]:
    """Every rank record under ``directory`` (zerogate.train.comms_volume's layout)."""
    directory = Path(directory)
    records = []
    for path in sorted(directory.glob("*/g*/rank*.json")):
        if _RECORD_FILE.match(path.relative_to(directory).as_posix()):
            records.append(CommsRecord.read(path))
    return records


def measured_per_step(phase: list[LoggedCalls], steps: int, world: int) -> dict[str, Any]:
    """One rank's measured records of ``steps`` optimizer steps, per step: per kind calls, S and volume."""
    kinds: dict[str, dict[str, Any]] = {}
    for entry in phase:
        name, calls, msg = entry.name, entry.calls, entry.msg_bytes
        kind = logged_kind(name)
        key = kind if kind is not None else name
        row = kinds.setdefault(
            key,
            {
                "calls": 0.0,
                "tensor_bytes": 0.0,
                "volume_bytes": 0.0,
                "known": kind is not None,
                "record_names": [],
            },
        )
        if name not in row["record_names"]:
            row["record_names"].append(name)
        row["calls"] += calls / steps
        if kind is None:
            row["tensor_bytes"] += calls * msg / steps  # the logged bytes, as logged: no volume definition
            row["volume_bytes"] = None
        else:
            tensor = logged_tensor_bytes(name, msg, world)
            row["tensor_bytes"] += calls * tensor / steps
            row["volume_bytes"] += calls * volume_bytes(kind, tensor, world) / steps
    known = [row for row in kinds.values() if row["known"]]
    unknown = sorted(key for key, row in kinds.items() if not row["known"])
    return {
        "kinds": dict(sorted(kinds.items())),
        "calls": sum(row["calls"] for row in kinds.values()),
        "volume_bytes": sum(row["volume_bytes"] for row in known),
        "unknown_kinds": unknown,
        "complete": not unknown,
    }


def theory_per_step(record: CommsRecord, world: int) -> dict[str, Any]:
    """The theory's terms for a record's scheme and accumulation, per optimizer step."""
    accumulation = record.accumulation
    settings = record.theory_settings.model_dump()
    terms = theory(
        record.counts,
        record.scheme,
        accumulation,
        world,
        record.dtype_bytes,
        settings.pop("persistence_threshold"),
        buffer_bytes=record.buffer_bytes,
        **settings,
    )
    rows = []
    for term in terms:
        calls, tensor = per_optimizer_step(term, accumulation)
        rows.append(
            {
                "name": term.name,
                "kind": term.kind,
                "per": term.per,
                "departure": term.departure,
                "why": term.why,
                "calls": calls,
                "tensor_bytes": tensor,
                "volume_bytes": volume_bytes(term.kind, tensor, world),
            }
        )
    kinds: dict[str, dict[str, float]] = {}
    for row in rows:
        kind = kinds.setdefault(row["kind"], {"calls": 0.0, "tensor_bytes": 0.0, "volume_bytes": 0.0})
        for key in ("calls", "tensor_bytes", "volume_bytes"):
            kind[key] += row[key]
    base = [row for row in rows if not row["departure"]]
    return {
        "terms": rows,
        "kinds": dict(sorted(kinds.items())),
        "calls": sum(row["calls"] for row in rows),
        "volume_bytes": sum(row["volume_bytes"] for row in rows),
        "base_volume_bytes": sum(row["volume_bytes"] for row in base),
        "departures_volume_bytes": sum(row["volume_bytes"] for row in rows if row["departure"]),
    }


def _ratio(measured: float | None, expected: float) -> float | None:
    if measured is None or expected == 0:
        return None if measured is None or measured != 0 else 1.0
    return measured / expected


def _row(scheme: str, accumulation: int, records: list[CommsRecord], world: int) -> dict[str, Any]:
    row: dict[str, Any] = {"scheme": scheme, "accumulation": accumulation}
    if not records:
        return {
            **row,
            "status": "not_run",
            "reason": "no record of this scheme from any rank",
            "ranks": {},
            "missing_ranks": list(range(world)),
        }
    present = {r.rank for r in records}
    row["missing_ranks"] = [r for r in range(world) if r not in present]
    failed = [r for r in records if r.status != "run"]
    if failed:
        reasons = sorted({f"rank {r.rank}: {r.reason}" for r in failed})
        return {**row, "status": "not_run", "reason": "; ".join(reasons), "ranks": {}}
    steps = records[0].measured_steps
    ranks = {
        r.rank: measured_per_step(r.phases["measured"] or [], r.measured_steps, world)
        for r in sorted(records, key=lambda r: r.rank)
    }
    expected = theory_per_step(records[0], world)
    worst = max(ranks.values(), key=lambda m: m["volume_bytes"])
    complete = all(m["complete"] for m in ranks.values())
    ratio = _ratio(worst["volume_bytes"], expected["volume_bytes"])
    within = ratio is not None and complete and abs(ratio - 1) <= TOLERANCE
    base_ratio = _ratio(worst["volume_bytes"], expected["base_volume_bytes"])
    return {
        **row,
        "status": "run",
        "reason": None,
        "measured_steps": steps,
        "warmup_steps": records[0].warmup_steps,
        "recorder": records[0].recorder,
        "host_device_copies": records[0].host_device_copies,
        "seconds": max(r.seconds for r in records),
        "ranks": ranks,
        "measured_volume_bytes": worst["volume_bytes"],
        "measured_calls": worst["calls"],
        "complete": complete and not row["missing_ranks"],
        "theory": expected,
        "ratio": ratio,
        "base_ratio": base_ratio,
        "within_tolerance": within,
        # Beyond +-5 % of the paper's terms but within it once the named departures are added: explained.
        "explained_by_terms": within and (base_ratio is None or abs(base_ratio - 1) > TOLERANCE),
    }


def tabulate(records: list[CommsRecord], schemes: tuple[str, ...] = SCHEMES) -> CommsVolume:
    """The table: one row per scheme and accumulation (every scheme, run or not), in SCHEMES order."""
    if not records:
        raise ValueError("no communication records")
    world = records[0].world_size
    accumulations = sorted({r.accumulation for r in records})
    rows = []
    for scheme in schemes:
        for accumulation in accumulations:
            rows.append(
                _row(
                    scheme,
                    accumulation,
                    [r for r in records if r.scheme == scheme and r.accumulation == accumulation],
                    world,
                )
            )
    unexpected = sorted({r.scheme for r in records} - set(schemes))
    counts = records[0].counts
    return CommsVolume.of(
        {
            "definition": DEFINITION,
            "volume_factors": dict(VOLUME_FACTOR),
            "ring_factor": ring_factor(world),
            "world_size": world,
            "parameters": counts.total,
            "dtype_bytes": records[0].dtype_bytes,
            "accumulations": accumulations,
            "tolerance": TOLERANCE,
            "rows": rows,
            "unexpected_schemes": unexpected,
            "note": (
                "Short runs apart from the timed run: DeepSpeed's comms logger synchronises every "
                "collective, "
                "so these runs are never timed."
            ),
        },
        "the communication table",
    )


def scheme_ratio(
    table: CommsVolume, accumulation: int, scheme: str = CLAIM_SCHEME, baseline: str = BASELINE_SCHEME
) -> dict[str, Any]:
    """``scheme``'s volume over ``baseline``'s at ``accumulation``: measured where both ran, and in theory."""
    row, base = table.row(scheme, accumulation), table.row(baseline, accumulation)
    out: dict[str, Any] = {
        "accumulation": accumulation,
        "scheme": scheme,
        "baseline": baseline,
        "measured": None,
        "theory": None,
        "why": None,
    }
    if row is None or base is None:
        out["why"] = f"accumulation {accumulation} was not measured"
        return out
    if row.status == "run" and base.status == "run":
        out["theory"] = _ratio(row.theory.volume_bytes, base.theory.volume_bytes)
        if row.complete and base.complete:
            out["measured"] = _ratio(row.measured_volume_bytes, base.measured_volume_bytes)
        else:
            out["why"] = (
                "a record is incomplete (missing rank or a collective kind without a volume definition)"
            )
    else:
        out["why"] = "; ".join(f"{r.scheme} not run: {r.reason}" for r in (row, base) if r.status != "run")
    return out


def claim_verdict(table: CommsVolume, stated: float, claim_accumulation: int) -> dict[str, Any]:
    """The seed's statement (ZeRO-3 = ``stated`` x DDP's volume), measured: holds at accumulation 1 when the
    measured ratio is within the tolerance of ``stated``; the ratio at the claim's own accumulation beside
    it."""
    at_one = scheme_ratio(table, 1)
    at_claim = scheme_ratio(table, claim_accumulation)
    measured = at_one["measured"]
    holds = None if measured is None else abs(measured / stated - 1) <= TOLERANCE
    row = table.row(CLAIM_SCHEME, 1)
    departures = []
    if row is not None and row.status == "run":
        # The named terms that move ZeRO-3 away from the paper's count, largest first.
        departures = sorted(
            (
                {"name": t.name, "volume_bytes": t.volume_bytes}
                for t in row.theory.terms
                if t.departure and t.volume_bytes
            ),
            key=lambda t: -abs(t["volume_bytes"]),
        )
    return {
        "stated": stated,
        "tolerance": TOLERANCE,
        "scheme": CLAIM_SCHEME,
        "baseline": BASELINE_SCHEME,
        "at_accumulation_1": at_one,
        "holds_at_accumulation_1": holds,
        "claim_accumulation": claim_accumulation,
        "stated_at_claim_accumulation": stated * claim_accumulation,
        "at_claim_accumulation": at_claim,
        "departures": departures,
    }
