"""Entry point of the predict_peak_memory rule (logic: zerogate.plan.planner.peak_for_profile)."""
from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.ledger import human
from zerogate.plan.planner import peak_for_profile

with logging_to(snakemake.log[0]) as log:
    prediction = peak_for_profile(snakemake.params.sections, read_json(snakemake.input.ds_config),
                                  read_json(snakemake.input.run_spec), read_json(snakemake.input.baseline)["baseline"])
    for term, value in prediction["terms(bytes)"].items():
        log.info("  %-24s %s", term, human(value))
    log.info("predicted peak per rank (%s): %s", prediction["what"], human(prediction["total(bytes)"]))
    write_json(snakemake.output.peak, prediction)
