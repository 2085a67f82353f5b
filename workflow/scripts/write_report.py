"""Entry point of the write_report rule (logic: zerogate.report)."""
from pathlib import Path

import pandas as pd

from zerogate.entry import logging_to, read_json
from zerogate.report import render_html

with logging_to(snakemake.log[0]):
    steps = pd.read_parquet(snakemake.input.steps)
    warmup = int(steps.loc[steps["warmup"], "step"].max()) if steps["warmup"].any() else 0
    page = render_html(
        verdicts=read_json(snakemake.input.verdicts),
        steps=steps,
        provenance=read_json(snakemake.input.provenance),
        deviations=read_json(snakemake.input.deviations),
        figures={k: snakemake.input[k] for k in ("loss", "step_time", "memory")},
        warmup_steps=warmup,
    )
    Path(snakemake.output.html).write_text(page)
