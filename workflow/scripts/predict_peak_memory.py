"""Entry point of the predict_peak_memory rule (logic: zerogate.predict.peak.peak_for_run, or
fsdp2_peak_for_run for a variant that FSDP2 trains)."""

from zerogate.contracts.plan import RuntimeBaseline
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.entry import logging_to
from zerogate.predict.peak import fsdp2_peak_for_run, peak_for_run
from zerogate.units import format_bytes

with logging_to(snakemake.log[0]) as log:
    predict = fsdp2_peak_for_run if snakemake.params.engine == "fsdp2" else peak_for_run
    prediction = predict(
        RunSpec.read(snakemake.input.run_spec),
        DsConfig.read(snakemake.input.ds_config),
        RuntimeBaseline.read(snakemake.input.baseline).baseline,
    )
    for term, value in prediction.terms_bytes.items():
        log.info("  %-24s %s", term, format_bytes(value))
    log.info("predicted peak per rank (%s): %s", prediction.what, format_bytes(prediction.total_bytes))
    prediction.write(snakemake.output.peak)
