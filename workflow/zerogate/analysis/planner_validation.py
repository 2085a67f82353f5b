"""Judging zerogate's predictions against published setups, and the printed table.

Targets (each figure is judged against one, with the gates' vocabulary: PASS, FAIL, NOT MEASURED):

- an estimator table's figure **to its rounding**: the figure as printed stands for an interval (half a
  printed unit either side when rounded to nearest, one unit up when floored, as Python's ``>> 20``);
  the prediction is an interval too when the parameter counts it is computed from were themselves
  printed rounded (DeepSpeed prints ``int(params / 1e6)`` M). The target is met when the two overlap.
- a ZeRO-paper figure to its rounding, the same way;
- a published fits / out-of-memory outcome: zerogate's verdict on the memory the source names (the
  device's, or the host's) agrees;
- a published largest micro-batch: zerogate's largest fitting micro-batch within a factor 1.25 of it.

A memory reading (a peak someone measured) is printed with its error and no target, against the level the
planner predicts for the reading's metric (the tensor peak for torch.cuda.max_memory_allocated, the
allocator's
for max_memory_reserved, the device's for nvidia-smi and for a reading whose tool is not named).

Pure Python: the predictions come from zerogate.bench.planner_validation, which calls the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.contracts.planner_validation import FigureCheck, PlannerValidation, RowCheck, TargetSummary
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS
from zerogate.units import format_bytes

ESTIMATOR_ROUNDING = "estimator figure to its rounding"
PAPER_ROUNDING = "paper figure to its rounding"
VERDICT_AGREES = "fits / out-of-memory verdict agrees"
LARGEST_WITHIN = "largest micro-batch within a factor 1.25"
TARGETS = (ESTIMATOR_ROUNDING, PAPER_ROUNDING, VERDICT_AGREES, LARGEST_WITHIN)
LARGEST_FACTOR = 1.25
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


def judge_outcome(
    published: str, memory: str | None, predicted_fits: bool, predicted: str, basis: str
) -> FigureCheck:
    """A published outcome (``fits`` or ``out_of_memory`` in ``memory``) against zerogate's verdict on
    the same memory (``predicted_fits``; ``predicted``: its need and capacity in words)."""
    published_fits = published == "fits"
    shown = "fits" if published_fits else f"out of memory ({memory})"
    return FigureCheck(
        quantity="fits / out of memory",
        published=shown,
        predicted=("fits" if predicted_fits else "does not fit") + f": {predicted}",
        published_value=None,
        predicted_value=None,
        error_percent=None,
        target=VERDICT_AGREES,
        verdict=PASS if predicted_fits == published_fits else FAIL,
        basis=basis,
    )


def judge_largest_micro_batch(published: int, predicted: int, basis: str) -> FigureCheck:
    """zerogate's largest fitting micro-batch against the published one: PASS within the factor."""
    ratio = predicted / published
    within = 1 / LARGEST_FACTOR <= ratio <= LARGEST_FACTOR
    return FigureCheck(
        quantity="largest micro-batch per GPU",
        published=str(published),
        predicted=str(predicted) + ("" if predicted else " (micro-batch 1 does not fit)"),
        published_value=float(published),
        predicted_value=float(predicted),
        error_percent=error_percent(predicted, published),
        target=LARGEST_WITHIN,
        verdict=PASS if within else FAIL,
        basis=f"ratio {ratio:.2f}, within 1/{LARGEST_FACTOR:g}..{LARGEST_FACTOR:g} needed; {basis}",
    )


def reported_peak(
    published_bytes: float, metric: str, predicted_bytes: float, predicted_what: str, same_metric: bool
) -> FigureCheck:
    """A published memory reading beside zerogate's prediction of the level its metric measures
    (``same_metric``; else of the device's level, what must fit): the error, no target."""
    basis = (
        "no target; the predicted level of the reading's own metric"
        if same_metric
        else "no target: the reading's tool is not named, set against the device's level (allocator, CUDA "
        "context, communicator)"
    )
    return FigureCheck(
        quantity="peak memory per GPU",
        published=f"{format_bytes(published_bytes)} ({metric})",
        predicted=f"{format_bytes(predicted_bytes)} ({predicted_what})",
        published_value=published_bytes,
        predicted_value=predicted_bytes,
        error_percent=error_percent(predicted_bytes, published_bytes),
        target=None,
        verdict=None,
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


def summarise(rows: list[RowCheck]) -> list[TargetSummary]:
    """Per target: figures that met it, missed it, could not be judged."""
    counts = {target: {PASS: 0, FAIL: 0, NOT_MEASURED: 0} for target in TARGETS}
    for row in rows:
        for check in row.checks:
            if check.target is not None and check.verdict is not None:
                counts.setdefault(check.target, {PASS: 0, FAIL: 0, NOT_MEASURED: 0})[check.verdict] += 1
    return [
        TargetSummary(target=t, passed=c[PASS], failed=c[FAIL], not_measured=c[NOT_MEASURED])
        for t, c in counts.items()
    ]


def summary_line(summary: list[TargetSummary], rows: list[RowCheck]) -> str:
    parts = [
        f"{s.target}: {s.passed}/{s.passed + s.failed} met"
        + (f", {s.failed} missed" if s.failed else "")
        + (f", {s.not_measured} not judged" if s.not_measured else "")
        for s in summary
    ]
    untold = sum(1 for r in rows if r.not_expressed for c in r.checks if c.verdict == PASS)
    if untold:
        parts.append(
            f"{untold} of the met ones planned without a setting the row states (see 'not told to the "
            "planner')"
        )
    readings = [c for r in rows for c in r.checks if c.target is None]
    if readings:
        errors = [f"{c.error_percent:+.0f} %" for c in readings if c.error_percent is not None]
        parts.append(
            f"memory readings: {len(readings)}, {len(errors)} predicted"
            + (f" (errors {', '.join(errors)})" if errors else "")
        )
    return "summary: " + "; ".join(parts)


def _error(check: FigureCheck) -> str:
    return "" if check.error_percent is None else f"{check.error_percent:+.1f} %"


def table_text(validation: PlannerValidation) -> str:
    """The table as printed: per row its source, then each figure: published, zerogate, error, target,
    verdict and basis; the summary line last."""
    lines = [
        f"zerogate planner vs published setups ({validation.table}, sha256 {validation.table_sha256[:12]}; "
        f"zerogate {validation.pipeline_version}, commit {(validation.git.commit or 'n/a')[:12]}"
        f"{' (dirty)' if validation.git.dirty else ''}; "
        + ", ".join(f"{k} {v}" for k, v in validation.packages.items())
        + ")",
        "",
    ]
    for row in validation.rows:
        lines.append(f"{row.id} [{row.kind}] {row.source}")
        lines.append(f"    where: {row.where}")
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
    lines.append(summary_line(validation.summary, validation.rows))
    return "\n".join(lines) + "\n"
