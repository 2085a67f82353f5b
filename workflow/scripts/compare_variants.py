"""Entry point of the compare_variants rule (logic: zerogate.analysis.variants)."""

from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import VariantRun, VariantRuns, compare
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.plan import PeakPrediction
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.run import RunSpec
from zerogate.contracts.summary import RunSummary
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    spec = RunSpec.read(inputs.run_spec)  # the run spec every variant trained with
    runs = {
        name: VariantRun(read_rank_metrics(metrics), TrainSummary.read(summary), RunSummary.read(statistics))
        for name, summary, metrics, statistics in zip(
            params.variants, inputs.summaries, inputs.metrics, inputs.run_summaries
        )
    }
    table = compare(
        VariantRuns(
            runs,
            predictions={
                name: PeakPrediction.read(path) for name, path in zip(params.predicted, inputs.peaks)
            },
            communication=CommsVolume.read(inputs.communication),
            accumulation=spec.training.gradient_accumulation_steps,
            not_run=params.not_run,
            accelerator=spec.accelerator,
        )
    )
    table.write(snakemake.output.table)
    for row in table.rows:
        log.info("%s", row)
    log.info("fastest: %s, smallest: %s", table.fastest, table.smallest)
    for agreement in table.agreement:
        log.info("%s", agreement)
