"""Each step's time on the slowest rank (the rank with the highest median), steps 1 to 5, for every grid point
the clone given wrote: `PYTHONPATH=workflow:. .venv/bin/python docs/diagnostics/step_table.py <clone>`."""

import glob
import os
import sys

import pandas as pd

root = sys.argv[1]
points = sorted(
    os.path.basename(f)[:-5] for f in glob.glob(f"{root}/results/bench/vm/bench/planner_grid/profiles/*.yaml")
)
for p in points:
    steps = pd.read_parquet(f"{root}/results/{p}/vm/parsed/steps.parquet")
    slow = steps.groupby("rank")["step_time(s)"].median().idxmax()
    times = steps[steps["rank"] == slow].sort_values("step")["step_time(s)"].head(5)
    print(f"| `{p.replace('planner-grid-', '')}` | {' / '.join(f'{t:.3f}' for t in times)} |")
