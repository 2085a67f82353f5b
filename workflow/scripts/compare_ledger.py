"""Entry point of the compare_ledger rule (logic: zerogate.analysis.ledger_check)."""

from zerogate.analysis.ledger_check import compare, read_measurements, with_peaks
from zerogate.analysis.parse import read_steps
from zerogate.contracts.plan import PeakPrediction
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.predict.setup import setup_from_config
from zerogate.units import format_bytes

with logging_to(snakemake.log[0]) as log:
    run_spec = RunSpec.read(snakemake.input.run_spec)
    # The model exactly as trained and planned: the run spec's shape and vocabulary (one model).
    counts = count_parameters(planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len))
    setup = setup_from_config(DsConfig.read(snakemake.input.ds_config), run_spec)
    # Held tensor bytes from the metrics directory; the allocator peaks from parse_logs' steps table.
    steps = read_steps(snakemake.input.steps)
    measured = read_measurements(snakemake.input.metrics, steps)
    table = compare(counts, setup, measured)
    # Each rank's predicted peak (predict_peak_memory) against its measured peak, level by level.
    table = with_peaks(table, PeakPrediction.read(snakemake.input.peak), steps, measured)
    for row in table.levels:
        error = "n/a" if row.error_percent is None else f"{row.error_percent:+.2f} %"
        log.info(
            "rank %s %-36s predicted %s measured %s error %s",
            row.rank,
            row.level,
            format_bytes(row.predicted_bytes),
            format_bytes(row.measured_bytes),
            error,
        )
    for row in table.rows + table.peak.rows:
        error = "n/a" if row.error_percent is None else f"{row.error_percent:+.2f} %"
        log.info(
            "rank %s %-28s predicted %s measured %s error %s%s",
            row.rank,
            row.term,
            format_bytes(row.predicted_bytes),
            format_bytes(row.measured_bytes),
            error,
            f" ({row.off})" if getattr(row, "off", None) else "",
        )
    table.write(snakemake.output.table)
