"""Entry point of the plot_figures rule (logic: zerogate.figures)."""
import pandas as pd

from zerogate.entry import logging_to, read_json
from zerogate.figures import loss_figure, memory_figure, step_time_figure

with logging_to(snakemake.log[0]):
    steps = pd.read_parquet(snakemake.input.steps)
    verdicts = read_json(snakemake.input.verdicts)
    warmup = int(steps.loc[steps["warmup"], "step"].max()) if steps["warmup"].any() else 0
    loss_figure(steps, pd.read_parquet(snakemake.input.events), warmup, snakemake.output.loss)
    step_time_figure(steps, warmup, verdicts, snakemake.output.step_time)
    memory_figure(steps, verdicts, snakemake.output.memory)
