"""The step-time ledger in words ("Where the time goes"), for ``plan/plan.txt`` and the console: reads the
plan contract only (zerogate.contracts.plan.StepTime), so the light rules that print a plan load
nothing more."""

from __future__ import annotations

from zerogate.contracts.plan import Floor, StepTime, Suggestion


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g} s"


def change_step(change: Suggestion, before: str = "", after: str = "") -> str:
    """The optimizer step a change leaves, in words between ``before`` and ``after``: its interval, "at
    least" its low end where a term has no figure; empty (without them) where it was not predicted."""
    low, high = change.step_time_low_s, change.step_time_high_s
    if low is None or high is None:
        return ""
    if change.step_time_missing:
        words = f"step at least {_s(low)} (no figure for {len(change.step_time_missing)} term(s))"
    else:
        words = f"step {_s(low)} to {_s(high)}"
    return f"{before}{words}{after}"


def interval_line(step: StepTime | None, steps: Floor) -> str:
    """The predicted optimizer-step interval beside the floor, and the term that decides it."""
    if step is None:
        return "predicted optimizer step: not predicted (a plan written before the step-time ledger)"
    return (
        f"predicted optimizer step: {_s(step.low_s)} to {_s(step.high_s)} "
        f"(floor {_s(steps.optimizer_step_floor_s)}; "
        f"micro-step {_s(step.micro_step_low_s)} to {_s(step.micro_step_high_s)} x {step.accumulation}); "
        f"decided by {step.deciding_term or 'n/a'}"
        + (f"; a lower bound: no figure for {'; '.join(step.missing)}" if step.missing else "")
    )


def time_lines(step: StepTime | None, steps: Floor) -> list[str]:
    """ "Where the time goes": the interval, the overlap rule, then each term per optimizer step with its
    share of the step, overlapped or serial, and its source; what has no figure."""
    lines = [interval_line(step, steps)]
    if step is None:
        return lines
    lines += [
        "where the time goes (per optimizer step, low to high; share of the step):",
        f"  overlap: {step.overlap}",
    ]
    for term in sorted(step.terms, key=lambda t: -(t.contribution_s or 0.0)):
        share = "n/a" if term.share is None else f"{100 * term.share:.0f} %"
        how = "overlapped" if term.overlapped else "serial"
        lines.append(
            f"  {term.name}: {_s(term.low_s)} to {_s(term.high_s)}, {share}, {how} "
            f"({term.kind}, per {term.per})"
        )
        lines.append(f"    source: {term.source}")
    lines += [f"  no figure: {m}" for m in step.missing]
    return lines
