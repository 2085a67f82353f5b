"""Each optimizer step's time on its slowest rank (zerogate.analysis.measures.step_time_per_step), steps 1 to 5,
for every grid point the clone given wrote: `PYTHONPATH=workflow:. .venv/bin/python
docs/diagnostics/step_table.py <clone>`."""

import glob
import os
import sys

import pandas as pd

from zerogate.analysis.measures import step_time_per_step

root = sys.argv[1]
points = sorted(
    os.path.basename(f)[:-5] for f in glob.glob(f"{root}/results/bench/vm/bench/planner_grid/profiles/*.yaml")
)
for p in points:
    times = step_time_per_step(pd.read_parquet(f"{root}/results/{p}/vm/parsed/steps.parquet")).head(5)
    print(f"| `{p.replace('planner-grid-', '')}` | {' / '.join(f'{t:.3f}' for t in times)} |")
