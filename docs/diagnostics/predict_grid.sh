#!/bin/bash
# Predictions for the default and every grid point, in the clone given, nothing else running.
set -euo pipefail
cd "$1"
export PATH="$PWD/.venv/bin:/usr/local/bin:/usr/bin:/bin"
date -u +"start %H:%M:%S"
for grid in config/planner_grid_heldout.yaml config/planner_grid_steptime.yaml; do
  snakemake --cores 2 --config profile=bench planner_grid=$grid -- write_grid_profiles > /dev/null 2>&1
done
snakemake --cores 2 -- predict_step_time > /tmp/pred_default.log 2>&1
for p in results/bench/vm/bench/planner_grid/profiles/*.yaml; do
  snakemake --cores 2 --config profile=$p -- predict_step_time > /tmp/pred_$(basename $p .yaml).log 2>&1
done
date -u +"end %H:%M:%S"
