#!/bin/bash
# A second run of the same predictions in the clone given: every grid point trained again, then the default
# (its checkpoints removed so it starts from step 0), the host reference before and after.
set -uo pipefail
cd "$1"
export PATH="$PWD/.venv/bin:/usr/local/bin:/usr/bin:/bin"
ref() { PYTHONPATH=workflow:. .venv/bin/python docs/diagnostics/diag_pair.py alone 2>&1 | tail -1; }
echo "ref before: $(ref)"
s0=$(head -1 /proc/stat); t0=$(date -u +%T)
for p in results/bench/vm/bench/planner_grid/profiles/*.yaml; do
  snakemake --cores 2 --config profile=$p --forcerun train -- parse_logs > /tmp/rerun_$(basename $p .yaml).log 2>&1 || echo "FAILED $p"
done
s1=$(head -1 /proc/stat); echo "grid $t0-$(date -u +%T) stat0=[$s0] stat1=[$s1]"
echo "ref after grid: $(ref)"
rm -rf results/cpu-tiny/vm/checkpoints
s0=$(head -1 /proc/stat); t0=$(date -u +%T)
snakemake --cores 2 --forcerun train -- parse_logs > /tmp/rerun_default.log 2>&1 || echo "FAILED default"
s1=$(head -1 /proc/stat); echo "default $t0-$(date -u +%T) stat0=[$s0] stat1=[$s1]"
echo "ref after default: $(ref)"
