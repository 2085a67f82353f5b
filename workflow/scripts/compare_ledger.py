"""Entry point of the compare_ledger rule (logic: zerogate.analysis.ledger_check)."""
import pandas as pd

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.ledger import count_parameters, human, setup_from_config
from zerogate.model.build import planned_model_config
from zerogate.analysis.ledger_check import compare, read_measurements, with_peaks

with logging_to(snakemake.log[0]) as log:
    manifest = read_json(snakemake.input.manifest)
    # The model exactly as trained and planned: the profile's shape and dataset.vocab_size (one model).
    counts = count_parameters(planned_model_config(snakemake.params.model, manifest["settings"]))
    setup = setup_from_config(read_json(snakemake.input.ds_config), read_json(snakemake.input.run_spec), manifest["seq_len"])
    # Held tensor bytes from the metrics directory; the allocator peaks from parse_logs' steps table.
    steps = pd.read_parquet(snakemake.input.steps)
    table = compare(counts, setup, read_measurements(snakemake.input.metrics, steps))
    # Each rank's predicted peak (predict_peak_memory) against its measured peak.
    table = with_peaks(table, read_json(snakemake.input.peak), steps)
    for row in table["rows"] + table["peak"]["rows"]:
        error = "n/a" if row["error(%)"] is None else f"{row['error(%)']:+.2f} %"
        log.info("rank %s %-28s predicted %s measured %s error %s%s", row["rank"], row["term"],
                 human(row["predicted(bytes)"]), human(row["measured(bytes)"]), error,
                 f" ({row['off']})" if row.get("off") else "")
    write_json(snakemake.output.table, table)
