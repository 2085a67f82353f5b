"""Judging zerogate's predictions against published setups, and the printed table.

Targets (each figure is judged against one, with the gates' vocabulary: PASS, FAIL, NOT MEASURED):

- an estimator table's figure **to its rounding**: the figure as printed stands for an interval (half a
  printed unit either side when rounded to nearest, one unit up when floored, as Python's ``>> 20``);
  the prediction is an interval too when the parameter counts it is computed from were themselves
  printed rounded (DeepSpeed prints ``int(params / 1e6)`` M). The target is met when the two overlap.
- a ZeRO-paper figure to its rounding, the same way;
- a published fits / out-of-memory outcome: zerogate's verdict on the memory the source names (the
  device's, or the host's) agrees; a verdict is one of :data:`FIT_VERDICTS`, and "may not fit" agrees with
  either outcome (the summary counts its share: at most :data:`MAY_NOT_FIT_SHARE` is the target);
- a published largest micro-batch: zerogate's largest fitting micro-batch within a factor 1.25 of it;
- a published reading: inside the plan's interval at the level it was read at (an out-of-memory message's
  allocated-plus-requested bytes: the plan's tensor peak at least that). A plan figure without an interval
  is printed with its error and no target.

Rows fall in three groups (:data:`GROUPS`), and the summary line leads with the independent one: published
runs someone measured; this machine's CPU grid (the planner's terms were written looking at those points);
and the consistency rows (DeepSpeed's estimator tables, the ZeRO paper's formulas), which check counting and
rounding against the formulas the planner's columns call, not prediction.

Pure Python: the predictions come from zerogate.bench.planner_validation, which calls the planner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from zerogate.contracts.planner_grid import GridLevel, PlannerGridTable
from zerogate.contracts.planner_validation import FigureCheck, PlannerValidation, RowCheck, TargetSummary
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS
from zerogate.units import format_bytes

ESTIMATOR_ROUNDING = "estimator figure to its rounding"
PAPER_ROUNDING = "paper figure to its rounding"
VERDICT_AGREES = "fits / out-of-memory verdict agrees"
LARGEST_WITHIN = "largest micro-batch within a factor 1.25"
READING_INSIDE = "reading inside the plan's interval at its level"
GRID_WITHIN = "CPU level within its target"
INDEPENDENT = "independent (published runs)"
THIS_MACHINE = "this machine (CPU grid)"
CONSISTENCY = "consistency (estimator and paper formulas)"
# The groups, in the order the summary line gives them, and the targets each holds.
GROUPS = {
    INDEPENDENT: (VERDICT_AGREES, LARGEST_WITHIN, READING_INSIDE),
    THIS_MACHINE: (GRID_WITHIN,),
    CONSISTENCY: (ESTIMATOR_ROUNDING, PAPER_ROUNDING),
}
GROUP_OF_KIND = {"measured": INDEPENDENT, "cpu_grid": THIS_MACHINE}
TARGETS = tuple(target for targets in GROUPS.values() for target in targets)
LARGEST_FACTOR = 1.25
# A plan's fit verdict: the need below the capacity, the capacity inside the need's interval, above it.
FITS, MAY_NOT_FIT, DOES_NOT_FIT = "fits", "may not fit", "does not fit"
FIT_VERDICTS = (FITS, MAY_NOT_FIT, DOES_NOT_FIT)
# The most of the published outcomes a plan may leave at "may not fit" (assumed: a verdict that hedges on more
# than one row in four tells a user little).
MAY_NOT_FIT_SHARE = 0.25
# A figure converted to bytes was rounded to whole bytes (config/published_setups/README.md, Units).
BYTE_ROUNDING = 1.0


@dataclass(frozen=True)
class Spread:
    """A predicted figure: at the counts as stated (``nominal``), and the lowest and highest it can be
    over the counts' printing rounding (all three equal for exact counts)."""

    low: float
    nominal: float
    high: float

    @classmethod
    def exact(cls, value: float) -> Spread:
        return cls(value, value, value)


def printed_interval(
    published_bytes: float, unit_bytes: float, resolution: float, rounding: str
) -> tuple[float, float]:
    """The whole bytes (both ends included) that print as the published figure: ``resolution`` printed
    units of ``unit_bytes`` each, rounded to nearest (half a step either side) or floored (up to one
    byte short of the next step)."""
    step = resolution * unit_bytes
    if rounding == "nearest":
        return published_bytes - step / 2 - BYTE_ROUNDING, published_bytes + step / 2 + BYTE_ROUNDING
    if rounding == "floor":
        return published_bytes - BYTE_ROUNDING, published_bytes + step - 1
    raise ValueError(f"unknown rounding {rounding!r}")


def error_percent(predicted: float, published: float) -> float | None:
    return None if not published else 100.0 * (predicted - published) / published


@dataclass(frozen=True)
class PrintedFigure:
    """A figure as a table printed it: the bytes it stands for, and the unit and rounding it was printed
    with (``resolution`` printed units of ``unit_bytes`` each, ``rounding`` nearest or floor)."""

    published_bytes: float
    unit: str
    unit_bytes: float
    resolution: float
    rounding: str

    def interval(self) -> tuple[float, float]:
        """The whole bytes that print as this figure (:func:`printed_interval`)."""
        return printed_interval(self.published_bytes, self.unit_bytes, self.resolution, self.rounding)

    def shown(self) -> str:
        """The figure as it was printed, e.g. '15.93 GB as printed (15.93 GiB (17.10 GB))'."""
        decimals = len(f"{self.resolution:g}".partition(".")[2])
        return (
            f"{self.published_bytes / self.unit_bytes:.{decimals}f} {self.unit} as printed "
            f"({format_bytes(self.published_bytes)})"
        )


def judge_printed(
    quantity: str, target: str, printed: PrintedFigure, predicted: Spread, predicted_by: str
) -> FigureCheck:
    """A printed figure against zerogate's: PASS when the prediction's interval overlaps the printed one."""
    low, high = printed.interval()
    overlaps = predicted.high >= low and predicted.low <= high
    spread = "" if predicted.low == predicted.high else " over the printed counts' rounding"
    return FigureCheck(
        quantity=quantity,
        published=printed.shown(),
        predicted=f"{format_bytes(predicted.nominal)} ({predicted_by})",
        published_value=printed.published_bytes,
        predicted_value=predicted.nominal,
        error_percent=error_percent(predicted.nominal, printed.published_bytes),
        target=target,
        verdict=PASS if overlaps else FAIL,
        basis=(
            f"printed to {printed.resolution:g} {printed.unit} ({printed.rounding}): "
            f"{low:.0f}..{high:.0f} B; predicted {predicted.low:.0f}..{predicted.high:.0f} B{spread}"
        ),
    )


def group_of(kind: str) -> str:
    """The group (:data:`GROUPS`) of a row of this kind: estimator and paper rows are consistency checks."""
    return GROUP_OF_KIND.get(kind, CONSISTENCY)


def worst_verdict(verdicts: Iterable[str]) -> str:
    """Several checks' fit verdicts as one: does not fit if one does not, may not fit if one may not."""
    seen = set(verdicts)
    return next((v for v in reversed(FIT_VERDICTS) if v in seen), FITS)


def judge_outcome(
    published: str, memory: str | None, verdict: str, predicted: str, basis: str
) -> FigureCheck:
    """A published outcome (``fits`` or ``out_of_memory`` in ``memory``) against zerogate's fit verdict on
    the same memory (one of :data:`FIT_VERDICTS`; ``predicted``: its need and capacity in words). "may not
    fit" agrees with either outcome."""
    if verdict not in FIT_VERDICTS:
        raise ValueError(f"unknown fit verdict {verdict!r}")
    published_fits = published == "fits"
    shown = "fits" if published_fits else f"out of memory ({memory})"
    agrees = verdict == MAY_NOT_FIT or (verdict == FITS) == published_fits
    return FigureCheck(
        quantity="fits / out of memory",
        published=shown,
        predicted=f"{verdict}: {predicted}",
        published_value=None,
        predicted_value=None,
        error_percent=None,
        target=VERDICT_AGREES,
        verdict=PASS if agrees else FAIL,
        basis=basis + ("; may not fit agrees with either outcome" if verdict == MAY_NOT_FIT else ""),
    )


def may_not_fit(check: FigureCheck) -> bool:
    return check.target == VERDICT_AGREES and check.predicted.startswith(MAY_NOT_FIT + ":")


def judge_largest_micro_batch(
    published: int, predicted: int, basis: str, may_fit: int | None = None
) -> FigureCheck:
    """zerogate's largest fitting micro-batch against the published one: PASS within the factor. With
    ``may_fit`` (the largest that may fit: no check's verdict "does not fit"), the plan's answer is the range
    ``predicted``..``may_fit`` and the published one agrees within the factor of either end."""
    top = predicted if may_fit is None else max(may_fit, predicted)
    within = predicted / LARGEST_FACTOR <= published <= top * LARGEST_FACTOR
    ratio = predicted / published
    shown = str(predicted) + ("" if predicted else " (micro-batch 1 does not fit)")
    if top != predicted:
        shown += f", may fit up to {top}"
    return FigureCheck(
        quantity="largest micro-batch per GPU",
        published=str(published),
        predicted=shown,
        published_value=float(published),
        predicted_value=float(predicted),
        error_percent=error_percent(predicted, published),
        target=LARGEST_WITHIN,
        verdict=PASS if within else FAIL,
        basis=(
            f"ratio {ratio:.2f}, within 1/{LARGEST_FACTOR:g}..{LARGEST_FACTOR:g} of the plan's range needed; "
            f"{basis}"
        ),
    )


def judge_reading(
    quantity: str, published_bytes: float, level: str, planned: Spread, planned_what: str, lower_bound: bool
) -> FigureCheck:
    """A published figure read at ``level`` against the plan's figure at the same level. With an interval
    (``planned.low < planned.high``) it is judged: PASS inside it; a ``lower_bound`` (an out-of-memory
    message's allocated plus requested bytes) is judged always: PASS when the plan's high end reaches it.
    A plan figure without an interval is printed with its error and no target."""
    judged = lower_bound or planned.low < planned.high
    if lower_bound:
        inside = planned.high >= published_bytes
        basis = "the message's allocated plus requested bytes: the plan's figure at least that"
    else:
        inside = planned.low <= published_bytes <= planned.high
        basis = (
            f"inside {format_bytes(planned.low)}..{format_bytes(planned.high)}"
            if judged
            else "no target: the plan gives this level without an interval"
        )
    return FigureCheck(
        quantity=quantity,
        published=f"{format_bytes(published_bytes)} ({level})",
        predicted=f"{format_bytes(planned.nominal)} ({planned_what})",
        published_value=published_bytes,
        predicted_value=planned.nominal,
        error_percent=error_percent(planned.nominal, published_bytes),
        target=READING_INSIDE if judged else None,
        verdict=(PASS if inside else FAIL) if judged else None,
        basis=basis,
    )


def printed_by_another_formula(
    check: FigureCheck, installed: str, change_version: str, change: str, formulas: str
) -> FigureCheck:
    """``check`` of a figure the installed DeepSpeed computes by another formula than the one that printed it
    (DeepSpeed changed it in ``change_version``): NOT MEASURED, its prediction and error still shown. The
    printed figure says nothing about the installed estimator, and the installed one cannot reproduce it."""
    return check.model_copy(
        update={
            "verdict": NOT_MEASURED,
            "basis": (
                f"not judged: printed by a DeepSpeed before {change_version}; {change} changed this figure's "
                f"formula ({formulas}), and the installed DeepSpeed {installed} computes the new one. "
                f"Judged anyway it would be {check.verdict}: {check.basis}"
            ),
        }
    )


def not_judged(quantity: str, published: str, target: str | None, why: str) -> FigureCheck:
    """A figure nothing can be judged against (the source leaves out what the prediction needs):
    NOT MEASURED against its target (no verdict for a figure without one)."""
    return FigureCheck(
        quantity=quantity,
        published=published,
        predicted="—",
        published_value=None,
        predicted_value=None,
        error_percent=None,
        target=target,
        verdict=NOT_MEASURED if target else None,
        basis=why,
    )


def missed(quantity: str, published: str, target: str | None, why: str) -> FigureCheck:
    """A figure zerogate gives no prediction for although the row states all it needs: FAIL against its
    target (no verdict for a figure without one)."""
    return FigureCheck(
        quantity=quantity,
        published=published,
        predicted="no prediction",
        published_value=None,
        predicted_value=None,
        error_percent=None,
        target=target,
        verdict=FAIL if target else None,
        basis=why,
    )


def grid_check(level: GridLevel) -> FigureCheck:
    """One level of one CPU grid point as bench_planner_grid judged it: predicted against measured, within
    the level's target or not (NOT MEASURED: nothing measured)."""
    verdict = {True: PASS, False: FAIL, None: NOT_MEASURED}[level.within_target]
    return FigureCheck(
        quantity=f"CPU {level.level} peak (rank {level.rank})",
        published=f"{format_bytes(level.measured_bytes)} measured on this machine",
        predicted=format_bytes(level.predicted_bytes),
        published_value=float(level.measured_bytes),
        predicted_value=float(level.predicted_bytes),
        error_percent=level.error_percent,
        target=GRID_WITHIN,
        verdict=verdict,
        basis=f"within {level.target_percent:g} % (bench_planner_grid's target for this level); in-sample",
    )


def grid_rows(table: PlannerGridTable, source: str) -> list[RowCheck]:
    """This machine's CPU grid (bench_planner_grid's table, read from ``source``) as rows, one per point."""
    points: dict[str, list[GridLevel]] = {}
    for level in table.rows:
        points.setdefault(level.point, []).append(level)
    return [
        RowCheck(
            id=point,
            kind="cpu_grid",
            group=THIS_MACHINE,
            source=source,
            where=(
                f"{levels[0].architecture} {levels[0].parameters} parameters, {levels[0].scheme}, "
                f"micro-batch {levels[0].micro_batch}, sequence {levels[0].seq_len}"
            ),
            checks=[grid_check(level) for level in levels],
            not_expressed=[],
        )
        for point, levels in points.items()
    ]


def summarise(rows: list[RowCheck]) -> list[TargetSummary]:
    """Per target, in its group: figures that met it, missed it, could not be judged."""
    counts = {target: {PASS: 0, FAIL: 0, NOT_MEASURED: 0} for target in TARGETS}
    for row in rows:
        for check in row.checks:
            if check.target is not None and check.verdict is not None:
                counts.setdefault(check.target, {PASS: 0, FAIL: 0, NOT_MEASURED: 0})[check.verdict] += 1
    group = {target: name for name, targets in GROUPS.items() for target in targets}
    return [
        TargetSummary(
            group=group.get(t, CONSISTENCY),
            target=t,
            passed=c[PASS],
            failed=c[FAIL],
            not_measured=c[NOT_MEASURED],
        )
        for t, c in counts.items()
    ]


def _count(checks: list[FigureCheck], what: str) -> str:
    judged = [c for c in checks if c.verdict in (PASS, FAIL)]
    passed = sum(1 for c in judged if c.verdict == PASS)
    unjudged = len(checks) - len(judged)
    return f"{what} {passed}/{len(judged)}" + (f" ({unjudged} not judged)" if unjudged else "")


def independent_part(rows: list[RowCheck]) -> str:
    """The published runs' figures in words: verdicts agreeing (with the share of "may not fit"), largest
    micro-batches within the factor, readings inside the plan's interval, the errors of those without one."""
    checks = [c for r in rows for c in r.checks]
    verdicts = [c for c in checks if c.target == VERDICT_AGREES]
    hedged = sum(1 for c in verdicts if may_not_fit(c))
    judged = sum(1 for c in verdicts if c.verdict in (PASS, FAIL))
    share = f"{100 * hedged / judged:.0f} %" if judged else "n/a"
    parts = [
        _count(verdicts, "fits / out of memory agree")
        + f" (may not fit: {hedged} of {judged}, {share}; at most {100 * MAY_NOT_FIT_SHARE:.0f} %)",
        _count([c for c in checks if c.target == LARGEST_WITHIN], "largest micro-batch within 1.25"),
        _count([c for c in checks if c.target == READING_INSIDE], "readings inside"),
    ]
    bare = [c for c in checks if c.target is None and c.predicted_value is not None]
    if bare:
        errors = [f"{c.error_percent:+.0f} %" for c in bare if c.error_percent is not None]
        parts[-1] += f", {len(bare)} without an interval" + (
            f" (errors {', '.join(errors)})" if errors else ""
        )
    unplanned = sum(1 for c in checks if c.target is None and c.predicted_value is None)
    if unplanned:
        parts[-1] += f", {unplanned} not predicted (the row leaves unstated what the plan needs)"
    return ", ".join(parts)


def summary_line(
    summary: list[TargetSummary], rows: list[RowCheck], grid: str | None = None, step_times: str | None = None
) -> str:
    """The table's last line, the independent group first: the published runs (and of them the held-out
    rows; ``step_times``: the published step times' first predictions, summarised by
    zerogate.bench.step_time_rows.first_summary), this machine's grid (``grid``: where it was read; None: not
    run), then the consistency rows."""
    independent = [r for r in rows if r.group == INDEPENDENT]
    parts = [f"{INDEPENDENT}: {independent_part(independent)}"]
    held_out = [r for r in independent if r.held_out]
    if held_out:
        parts.append(f"of them held out ({len(held_out)} rows): {independent_part(held_out)}")
    untold = sum(1 for r in independent if r.not_expressed for c in r.checks if c.verdict == PASS)
    if untold:
        parts.append(
            f"{untold} of the met ones planned without a setting the row states "
            "(see 'not told to the planner')"
        )
    if step_times is not None:
        parts.append(f"published step times, first predictions: {step_times}")
    by_target = {s.target: s for s in summary}

    def counted(target: str, what: str) -> str:
        s = by_target[target]
        return f"{what} {s.passed}/{s.passed + s.failed}" + (
            f", {s.not_measured} not judged" if s.not_measured else ""
        )

    if grid is None:
        parts.append(f"{THIS_MACHINE}: not run here (bench_planner_grid writes it)")
    else:
        parts.append(f"{THIS_MACHINE}, in-sample: {counted(GRID_WITHIN, 'levels within target')}")
    parts.append(
        f"{CONSISTENCY}, counting and rounding, not prediction: "
        f"{counted(ESTIMATOR_ROUNDING, 'estimator')}; {counted(PAPER_ROUNDING, 'paper')}"
    )
    return "summary: " + "; ".join(parts)


def _error(check: FigureCheck) -> str:
    return "" if check.error_percent is None else f"{check.error_percent:+.1f} %"


def row_lines(row: RowCheck) -> list[str]:
    """One row as printed: its source, then each figure: published, zerogate, error, target, verdict and
    basis."""
    held_out = " (held out)" if row.held_out else ""
    lines = [f"{row.id} [{row.kind}]{held_out} {row.source}", f"    where: {row.where}"]
    for check in row.checks:
        verdict = check.verdict or "(no target)"
        lines.append(
            f"  {verdict:<12} {check.quantity}: published {check.published}; zerogate {check.predicted}"
            + (f"; error {_error(check)}" if check.error_percent is not None else "")
        )
        lines.append(f"               target: {check.target or 'none'}; {check.basis}")
    for note in row.not_expressed:
        lines.append(f"  not told to the planner: {note}")
    lines.append("")
    return lines


def table_text(validation: PlannerValidation, step_times: str | None = None) -> str:
    """The table as printed: per row its source, then each figure: published, zerogate, error, target,
    verdict and basis; the summary line last (with ``step_times``, the published step times' first
    predictions, among the independent checks)."""
    lines = [
        f"zerogate planner vs published setups ({validation.table}, sha256 {validation.table_sha256[:12]}; "
        f"zerogate {validation.pipeline_version}, commit {(validation.git.commit or 'n/a')[:12]}"
        f"{' (dirty)' if validation.git.dirty else ''}; "
        + ", ".join(f"{k} {v}" for k, v in validation.packages.items())
        + ")",
        "",
    ]
    for group in GROUPS:
        lines.append(f"== {group} ==")
        lines.append("")
        for row in validation.rows:
            if row.group == group:
                lines.extend(row_lines(row))
    lines.append(summary_line(validation.summary, validation.rows, validation.grid, step_times))
    return "\n".join(lines) + "\n"
