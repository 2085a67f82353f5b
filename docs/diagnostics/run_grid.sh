#!/bin/bash
# The judgement runs, in the clone given: both grids' points, then the default, the host reference alone
# before and after each, steal from /proc/stat over each.
set -uo pipefail
cd "$1"
export PATH="$PWD/.venv/bin:/usr/local/bin:/usr/bin:/bin"
ref() { PYTHONPATH=workflow:. .venv/bin/python docs/diagnostics/diag_pair.py alone 2>&1 | tail -1; }
steal() { head -1 /proc/stat; }
echo "ref before: $(ref)"
for grid in config/planner_grid_heldout.yaml config/planner_grid_steptime.yaml; do
  s0=$(steal); t0=$(date -u +%T)
  snakemake --cores 2 --config profile=bench planner_grid=$grid -- bench_planner_grid > /tmp/run_$(basename $grid .yaml).log 2>&1; rc=$?
  s1=$(steal); echo "$grid rc=$rc $t0-$(date -u +%T) stat0=[$s0] stat1=[$s1]"
  echo "ref after $grid: $(ref)"
done
s0=$(steal); t0=$(date -u +%T)
snakemake --cores 2 -- parse_logs > /tmp/run_default.log 2>&1; rc=$?
s1=$(steal); echo "default rc=$rc $t0-$(date -u +%T) stat0=[$s0] stat1=[$s1]"
echo "ref after default: $(ref)"
