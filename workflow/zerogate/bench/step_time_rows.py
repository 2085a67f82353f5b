"""Published step times (config/published_setups/step_times.yaml) against the step-time ledger, printed:
each row predicted (zerogate.bench.step_time_predict) and judged (zerogate.bench.step_time_judged).

Each row with a pre-registered prediction (docs/preregistered/*.predictions.yaml,
zerogate.config.preregistered) is judged first by that prediction: the independent check. Every row is then
judged by the ledger as it stands, its verdict marked independent only where the ledger still gives the
registered interval.

    python -m zerogate.bench.step_time_rows     (prints the table; run from the repository root)
    python -m zerogate.bench.step_time_rows --table FILE --predictions-only [--write-predictions OUT]
        (intervals alone, to commit before the published figures are read; OUT the pre-registered file)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zerogate.analysis.step_time_validation import PRINTED_DIGITS, Judged, summary_line
from zerogate.bench.step_time_judged import RowResult, check_table, registered_predictions
from zerogate.config.host_cpus import host_memory
from zerogate.config.preregistered import (
    write_preregistered,
)
from zerogate.config.step_times import STEP_TIMES_FILE, StepTimeRow
from zerogate.errors import InputError


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.{PRINTED_DIGITS}g}"


def _interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{_number(interval[0])}..{_number(interval[1])}"


def _judged_text(judged: Judged) -> str:
    error = "-" if judged.error is None else f"{judged.error:+.0%}"
    return f"error {error}; width {_number(judged.width)}x"


def host_line(row: StepTimeRow) -> list[str]:
    """Where the row's host memory bandwidth comes from, where the CPU catalogue has its CPU."""
    memory = host_memory(row.hardware.host_cpu)
    if memory is None:
        return []
    return [f"    host memory: {memory.sockets} socket(s) of {memory.source}; a NUMA node a socket"]


def first_lines(results: list[RowResult]) -> list[str]:
    """The independent check, first: each pre-registered row judged by the prediction committed before its
    figure was read (each at the ledger of its day), file by file; the summary."""
    lines = [
        "== published step times: each row's first prediction, committed before its figure was read "
        "(independent) ==",
        "",
    ]
    firsts = [result for result in results if result.first is not None]
    if not firsts:
        return [*lines, "  no row has a pre-registered prediction (docs/preregistered/*.predictions.yaml)"]
    for file in dict.fromkeys(result.first.file for result in firsts if result.first):
        group = [result for result in firsts if result.first and result.first.file == file]
        lines.append(f"  {file} (the ledger at {group[0].first.predicted_at if group[0].first else '-'}):")
        for result in group:
            first = result.first
            assert first is not None
            lines += [
                f"    {result.row.id}: published {_number(result.published)} {result.unit}; registered "
                f"{_interval(first.registered.interval)}; {_judged_text(first.judged)}",
                f"      verdict: {first.judged.verdict}: {first.judged.why}",
            ]
    return [*lines, "  summary: " + first_summary(results)]


def first_summary(results: list[RowResult]) -> str:
    """The first predictions' verdicts summarised (the independent count the validation's headline takes)."""
    return summary_line([result.first.judged for result in results if result.first is not None])


def provenance_line(result: RowResult) -> str:
    """Whether the row's verdict as the ledger stands is an independent check: only where its figure was
    registered against and the ledger's interval has not changed since."""
    first = result.first
    if first is None:
        return "    in-sample: its figure was read with the row, before any prediction of it"
    if first.unchanged:
        return (
            f"    independent: the ledger still gives the prediction registered in {first.file} "
            f"(first verdict {first.judged.verdict})"
        )
    return (
        f"    in-sample: the interval changed since {first.file} registered it "
        f"(first verdict {first.judged.verdict})"
    )


def result_lines(results: list[RowResult]) -> list[str]:
    """Each row against the ledger as it stands: published, predicted interval, deciding term, error, width,
    verdict and why, and whether that verdict is independent (provenance_line); the summaries, of every row
    and of the rows still independent."""
    lines = ["== published step times against the step-time ledger as it stands ==", ""]
    for result in results:
        prediction, judged = result.prediction, result.judged
        interval = _interval(None if prediction is None else prediction.interval)
        lines += [
            f"  {result.row.id}  {result.row.source.url}",
            f"    published {_number(result.published)} {result.unit}; predicted {interval}"
            + (f" over {prediction.options} bracketed option(s)" if prediction else "")
            + f"; {_judged_text(judged)}",
            f"    deciding: {', '.join(prediction.deciding) if prediction and prediction.deciding else '-'}",
            *host_line(result.row),
            f"    verdict: {judged.verdict}: {judged.why}",
            provenance_line(result),
        ]
    still = [result.judged for result in results if result.first is not None and result.first.unchanged]
    lines += [
        "  summary, every row (in-sample where its figure was read before the ledger's last change): "
        + summary_line([result.judged for result in results]),
        "  summary, rows whose registered interval the ledger still gives (independent): "
        + summary_line(still),
    ]
    return lines


def report_lines(results: list[RowResult]) -> list[str]:
    """The independent first judgements, then the ledger as it stands (what validate_planner prints)."""
    return [*first_lines(results), "", *result_lines(results)]


def prediction_lines(results: list[RowResult]) -> list[str]:
    """Each row's prediction without its published figure, error or verdict: what is committed before the
    figures are read (a pre-registered check of rows not seen)."""
    lines = ["== step-time predictions, published figures not shown ==", ""]
    for result in results:
        prediction = result.prediction
        if prediction is None or prediction.interval is None:
            lines.append(f"  {result.row.id}: {result.judged.why}")
            continue
        low, high = prediction.interval
        lines += [
            f"  {result.row.id}: {_number(low)}..{_number(high)} {result.unit} over {prediction.options} "
            f"bracketed option(s); width {_number(high / low)}x",
            f"    deciding: {', '.join(prediction.deciding) or '-'}",
            *([f"    no figure: {'; '.join(prediction.missing)}"] if prediction.missing else []),
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=STEP_TIMES_FILE, help="a table of rows (step_times.yaml's schema)")
    parser.add_argument(
        "--predictions-only",
        action="store_true",
        help="print each row's interval without its published figure, error or verdict",
    )
    parser.add_argument(
        "--write-predictions",
        metavar="FILE",
        help="with --predictions-only: also write them as a pre-registered file "
        "(docs/preregistered/<table>.predictions.yaml), to commit before the figures are read",
    )
    args = parser.parse_args(argv)
    if args.write_predictions and not args.predictions_only:
        parser.error("--write-predictions goes with --predictions-only")
    repo = Path.cwd()
    try:
        results = check_table(repo, args.table, [] if args.predictions_only else None)
    except InputError as error:
        print(f"zerogate: error: {error}", file=sys.stderr)
        return 2
    if not args.predictions_only:
        print("\n".join(report_lines(results)))
        return 0
    print("\n".join(prediction_lines(results)))
    if args.write_predictions:
        write_preregistered(registered_predictions(results, args.table, repo), Path(args.write_predictions))
        print(f"written: {args.write_predictions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
