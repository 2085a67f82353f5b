"""Compute, communication and wait per rank (who waits for whom), and the straggler.

Each rank's record holds ``collectives(s)``: the host time it spent inside torch.distributed collectives
during the optimizer step (zerogate.runtime.collective_clock.CollectiveClock: the calls DeepSpeed issues
inside every micro-step -- ZeRO-3's parameter all-gathers and gradient reductions, timed at the handle's
wait() when asynchronous -- and the loop's boundary all-reduce; no synchronisation added). In a collective a
rank waits for the last rank to arrive, then the transfer takes the same time on every rank. So, per timed
optimizer step: communication(s) = the smallest ``collectives(s)`` over the ranks (the transfer, latency
included, that no rank avoids); wait(s) of a rank = its ``collectives(s)`` - communication(s) (the time it sat
in collectives waiting for the others); compute(s) = its ``step_time(s)`` - its ``collectives(s)`` (everything
else: forward, backward, optimizer, host work). Summing over the step's collectives before taking the minimum
makes wait a lower bound where different ranks are late at different collectives. Per rank the statistic is
the median over the timed steps (sums over them for totals). Defined only when every rank of the world size
recorded both times at every timed step, on the CPU accelerator (on CUDA, NCCL returns once the work is
queued, so host time says nothing about the device's wait).

Straggler: the rank with the largest median compute(s), named when it exceeds every other rank's by more
than ``STRAGGLER_MARGIN`` of the median optimizer-step time (slowest rank); below that the ranks differ by
noise and none is named. How much slower: its median compute(s) minus the next slowest rank's, and that as
a share of the latter's. The others wait for it: each other rank's median wait(s) per step (and the sum
over the timed steps).
"""

from __future__ import annotations

import pandas as pd

from zerogate.analysis.columns import COLLECTIVES_TIME, COMMUNICATION, COMPUTE, STEP_TIME, WAIT
from zerogate.analysis.health import missing_values, step_span
from zerogate.analysis.measures import median_of, per_rank, step_time, timed_steps
from zerogate.contracts.summary import RankBalance

# A straggler is named when its median compute exceeds every other rank's by more than this share of the
# median optimizer-step time: smaller differences are the machine's noise (two identical ranks on a shared
# 2-core machine differed by 4 % of the step time in the smoke run).
STRAGGLER_MARGIN = 0.10


def rank_times(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """Per (rank, timed step): step_time(s), collectives(s), communication(s), wait(s), compute(s) (see the
    module's definitions). A step where some rank's value is missing has no communication(s) and so no
    wait(s) for any rank (NaN)."""
    timed = timed_steps(steps, warmup_steps)
    frame = pd.DataFrame(
        {
            "rank": timed["rank"].astype(int),
            "step": timed["step"].astype(int),
            STEP_TIME: pd.to_numeric(timed[STEP_TIME], errors="coerce").astype(float),
            COLLECTIVES_TIME: pd.to_numeric(timed[COLLECTIVES_TIME], errors="coerce").astype(float)
            if COLLECTIVES_TIME in timed.columns
            else float("nan"),
        }
    )
    frame[COMMUNICATION] = frame.groupby("step")[COLLECTIVES_TIME].transform(lambda s: s.min(skipna=False))
    frame[WAIT] = frame[COLLECTIVES_TIME] - frame[COMMUNICATION]
    frame[COMPUTE] = frame[STEP_TIME] - frame[COLLECTIVES_TIME]
    return frame.sort_values(["rank", "step"]).reset_index(drop=True)


def _rank_time_problems(steps: pd.DataFrame, timed: pd.DataFrame, world_size: int | None) -> list[str]:
    """Why the records cannot say who waits for whom (empty when they can)."""
    if COLLECTIVES_TIME not in steps.columns or steps[COLLECTIVES_TIME].isna().all():
        return [
            f"the step records hold no {COLLECTIVES_TIME} (zerogate.train.metrics records it; a run with the "
            "metrics layer off, or from before it, has none)"
        ]
    devices = sorted(
        {str(d) for d in steps.get("device", pd.Series(dtype=str)).dropna() if str(d).startswith("cuda")}
    )
    if devices:
        return [
            f"{COLLECTIVES_TIME} is host time, and on {devices[0]} NCCL returns once a collective is queued: "
            "the device's wait is not measured"
        ]
    found = []
    present = sorted(int(r) for r in timed["rank"].unique()) if len(timed) else []
    expected = list(range(int(world_size))) if world_size else present
    missing = [r for r in expected if r not in present]
    if missing:
        found.append(f"ranks with no timed step records: {missing} of world size {len(expected)}")
    if len(expected) < 2:
        found.append("a single rank waits for no other")
    if not len(timed):
        found.append("no timed step (the run stopped within its warm-up)")
        return found
    all_steps = sorted(int(s) for s in timed["step"].unique())
    for rank in present:
        have = set(int(s) for s in timed.loc[timed["rank"] == rank, "step"])
        lacking = [s for s in all_steps if s not in have]
        if lacking:
            found.append(f"rank {rank}: {len(lacking)} timed steps missing ({step_span(lacking)})")
    for metric in (STEP_TIME, COLLECTIVES_TIME):
        for rank, listed in missing_values(timed, metric).items():
            found.append(
                f"rank {rank}: {metric} missing or non-finite at {len(listed)} steps ({step_span(listed)})"
            )
    return found


def rank_balance(steps: pd.DataFrame, warmup_steps: int, world_size: int | None = None) -> RankBalance:
    """Compute, communication and wait per rank over the timed steps, and the straggler (see the module's
    definitions). ``world_size``: the run's rank count (its records are counted against it); when None,
    the ranks that recorded."""
    timed = timed_steps(steps, warmup_steps)
    problems = _rank_time_problems(steps, timed, world_size)
    ranks = sorted(int(r) for r in timed["rank"].unique()) if len(timed) else []
    if problems:
        return RankBalance(
            ranks=ranks,
            timed_steps=int(timed["step"].nunique()) if len(timed) else 0,
            compute={},
            wait={},
            wait_total={},
            wait_share={},
            step_time={},
            communication=None,
            slowest=None,
            straggler=None,
            excess=None,
            excess_ratio=None,
            next_slowest=None,
            pace=None,
            margin=STRAGGLER_MARGIN,
            problems=problems,
        )
    frame = rank_times(steps, warmup_steps)
    by_rank = frame.groupby("rank")
    compute = {int(r): float(v) for r, v in per_rank(frame, COMPUTE, "median").items()}
    wait = {int(r): float(v) for r, v in per_rank(frame, WAIT, "median").items()}
    totals = by_rank[[WAIT, STEP_TIME]].sum()
    wait_total = {int(r): float(v) for r, v in totals[WAIT].items()}
    wait_share = {
        int(r): float(row[WAIT] / row[STEP_TIME]) if row[STEP_TIME] > 0 else float("nan")
        for r, row in totals.iterrows()
    }
    step_medians = {int(r): float(v) for r, v in per_rank(frame, STEP_TIME, "median").items()}
    communication = median_of(frame.groupby("step")[COMMUNICATION].first())
    ordered = sorted(compute, key=lambda r: compute[r], reverse=True)
    slowest, next_slowest = ordered[0], ordered[1]
    excess = compute[slowest] - compute[next_slowest]
    ratio = excess / compute[next_slowest] if compute[next_slowest] > 0 else float("inf")
    pace = step_time(steps, warmup_steps).value
    straggler = slowest if excess > STRAGGLER_MARGIN * pace else None
    return RankBalance(
        ranks=ranks,
        timed_steps=int(frame["step"].nunique()),
        compute=compute,
        wait=wait,
        wait_total=wait_total,
        wait_share=wait_share,
        step_time=step_medians,
        communication=communication,
        slowest=slowest,
        straggler=straggler,
        excess=excess,
        excess_ratio=ratio,
        next_slowest=next_slowest,
        pace=pace,
        margin=STRAGGLER_MARGIN,
    )
