"""The GPU check's micro-batch searches (tests/gpu/check_runs.py): per consumer card of the claimed box and
per point, the plan's largest micro-batch on that card and, on a GPU, the largest that trains with the caching
allocator capped where the card would hold it (tests/gpu/micro_batch_search.py), going on from recorded
searches where their cap matches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.gpu.check_files import MicroBatchRow, read_micro_batches
from tests.gpu.check_launch import Budget, launch
from tests.gpu.check_points import (
    CLAIMED_BOX,
    PROBE_STEPS,
    Point,
    capped_machine,
    plan_point,
    render_point,
    with_micro_batch,
)
from tests.gpu.check_results import outside_allocator, step_rows
from tests.gpu.micro_batch_search import Search, resumed
from zerogate.config.machines import from_fingerprint, load_description
from zerogate.contracts.machine import Fingerprint

# How far a recorded search's allocator cap may lie from this call's for the search to go on at the recorded
# cap: assumed, 32 MiB, sixteen times the 2 MiB by which the recorded calls' memory outside the allocator
# differed (1,706-1,708 MiB, tests/data/gpu_check/h200-2026-12-04), and under 0.5 % of the smallest card.
RESUME_TOLERANCE_BYTES = 32 * 2**20
CPU_NO_SEARCH = "not run: CPU mode (no CUDA device to cap)"


def planned_micro_batches(
    points: dict[str, Point], fingerprint: Fingerprint, extra_bytes: int = 0, card_name: str | None = None
) -> list[dict[str, Any]]:
    """Per consumer card of the claimed box (the small one first; only those whose name holds ``card_name``,
    when given) and per point: the plan's largest micro-batch per rank on this machine with its device capped
    at the card's capacity plus ``extra_bytes`` (its point figure, and the largest whose verdict is "fits"
    and the largest that "may fit")."""
    machine = from_fingerprint(fingerprint, "gpu-check")
    cards = sorted(load_description(CLAIMED_BOX).gpus, key=lambda card: card.memory_total_bytes)
    rows = []
    for card in [card for card in cards if card_name is None or card_name in card.name]:
        planned = card.model_copy(update={"memory_total_bytes": card.memory_total_bytes + extra_bytes})
        for name, point in points.items():
            plan = plan_point(point, capped_machine(machine, planned))
            rows.append(
                {
                    "point": name,
                    "card": card.name,
                    "cap_bytes": card.memory_total_bytes,
                    "planned_capacity(bytes)": planned.memory_total_bytes,
                    "plan": plan.largest_micro_batch_per_rank,
                    "plan_fits": plan.largest_micro_batch_fits_per_rank,
                    "plan_may_fit": plan.largest_micro_batch_may_fit_per_rank,
                }
            )
    return rows


def recorded_searches(folders: list[Path]) -> list[MicroBatchRow]:
    """The micro_batch.json rows of recorded checks, in the order given (a later one goes on from an
    earlier one's probes as well)."""
    return [row for folder in folders for row in read_micro_batches(folder)]


def outside_of(runs: list[dict[str, Any]], probed: dict[str, Any]) -> int | None:
    """What this call's process holds outside the caching allocator: the trained runs' largest gap
    (check_results.outside_allocator), else the probe's reading after its first collective (process_memory),
    else None (nothing measured it)."""
    rows = [
        row
        for run in runs
        if run["launch"] is not None
        for row in step_rows(run["point"], run["launch"].records, on_cpu=False)
    ]
    found = outside_allocator(rows)
    return found if found is not None else probed.get("after_nccl(bytes)")


def resume_cap(row: dict[str, Any], earlier: list[MicroBatchRow]) -> dict[str, Any]:
    """``row`` with the probes and cap of the last of ``earlier``'s rows for its point and card whose
    allocator cap lies within RESUME_TOLERANCE_BYTES of its own (rows without one capped at the card's
    capacity); unchanged when there is none."""
    same = [
        r
        for r in earlier
        if (r.point, r.card) == (row["point"], row["card"])
        and abs(r.probe_cap - row["allocator_cap(bytes)"]) <= RESUME_TOLERANCE_BYTES
    ]
    if not same:
        return row
    last = same[-1]
    return {
        **row,
        "allocator_cap(bytes)": last.probe_cap,
        "resumed_probes": [
            {"micro_batch": p.micro_batch, "outcome": p.outcome}
            for r in same
            for p in r.probes
            if not p.earlier
        ],
    }


def search_points(
    points: dict[str, Point],
    datasets: dict[str, Path],
    work: Path,
    budget: Budget,
    kind: str,
    card: str | None = None,
    outside: int | None = None,
    earlier: list[MicroBatchRow] = (),
) -> list[MicroBatchRow]:
    """Per consumer card of the claimed box (the small one first; only those whose name holds ``card``, when
    given) and per point: the plan's largest micro-batch on that card and, on a GPU, the largest that trains
    with the caching allocator capped at the card's capacity less ``outside`` (what this machine's process
    holds outside the allocator, measured in this call, which on the card takes from the same memory), so
    that a probe trains where the card would. Every search first tries the plan's own figure, then each goes
    on to its end while the budget lasts. A search recorded in ``earlier`` (micro_batch.json rows) for the
    same point and card at a cap within RESUME_TOLERANCE_BYTES of this one goes on from its probes, at its
    cap."""
    fingerprint = Fingerprint.read(work / "fingerprint.json")
    rows = [
        {
            **row,
            "outside_allocator(bytes)": outside,
            "allocator_cap(bytes)": row["cap_bytes"] - (outside or 0),
        }
        for row in planned_micro_batches(points, fingerprint, card_name=card)
    ]
    rows = [resume_cap(row, earlier) for row in rows]
    searches = [
        resumed(row["plan"], row["resumed_probes"]) if row.get("resumed_probes") else Search(row["plan"])
        for row in rows
    ]
    if kind == "cpu":
        return [searched(row, {"largest": None, "status": CPU_NO_SEARCH, "probes": []}) for row in rows]

    def trying(row: dict[str, Any]) -> Callable[[int], str]:
        def try_batch(micro_batch: int) -> str:
            what = f"search {row['point']} on {row['card']} at micro-batch {micro_batch}"
            if not budget.allows(what):
                return "out of budget"
            profile = with_micro_batch(points[row["point"]].profile, micro_batch, PROBE_STEPS[kind])
            where = work / "search" / f"{row['point']}-{row['cap_bytes']}-mb{micro_batch}"
            point = render_point(row["point"], profile, fingerprint, where)
            cap = row["allocator_cap(bytes)"]
            done = launch(point, datasets[row["point"]], where, budget.deadline, cap_bytes=cap)
            budget.launch_s = done.seconds
            return done.outcome

        return try_batch

    for probes in (1, None):  # the plan's figure for every search first, then each to its end
        for row, search in zip(rows, searches, strict=True):
            search.run(trying(row), probes)
    found = [searched(row, search.result()) for row, search in zip(rows, searches, strict=True)]
    for row in found:
        where = f"{row.point} on {row.card}"
        print(f"check_runs: search {where}: plan {row.plan}, measured {row.largest} ({row.status})")
    return found


def searched(row: dict[str, Any], result: dict[str, Any]) -> MicroBatchRow:
    """A planned row (its working ``resumed_probes`` left out) with its search's result, as the file holds
    it."""
    planned = {k: v for k, v in row.items() if k != "resumed_probes"}
    return MicroBatchRow.of({**planned, **result}, f"the search of {row['point']} on {row['card']}")
