# make run   — create .venv (pinned versions) and run the default pipeline end to end
# make test  — create .venv and run the test suite
# make compare — compare the runs under results/ (machines and profiles side by side)
# make plan MODEL=... BOX=... — plan a model (config.json or shipped name) on a box (description or short form)
# make gpu-kit — fetch and check the wheels a lent GPU machine lacks (docs/gpu-kit.md)
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
OPS_STAMP := $(VENV)/.ops-built
# Rules call `python`, `deepspeed` and `snakemake`: take them from the project's environment.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup run test lint format compare clean plan

# Set-up in two steps that overlap: what the ops build imports (envs/requirements-ops.txt) first, then the ops
# build beside the install of everything else (make -j2 below); both pinned as the resolved set.
PIP_PINNED := $(VENV)/bin/pip install --quiet -c envs/constraints.txt -c envs/requirements.txt
OPS_DEPS_STAMP := $(VENV)/.ops-deps-installed
$(OPS_DEPS_STAMP): envs/requirements-ops.txt envs/requirements.txt envs/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_PINNED) -r envs/requirements-ops.txt
	touch $(OPS_DEPS_STAMP)

$(STAMP): $(OPS_DEPS_STAMP) envs/requirements-nodeps.txt pyproject.toml
	$(PIP_PINNED) -r envs/requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps -r envs/requirements-nodeps.txt
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $(STAMP)

# DeepSpeed compiles its CPU ops on first use (about 2-3 minutes here): done once, at set-up, into the venv. The
# package is not installed yet while this runs: it is taken from workflow/.
$(OPS_STAMP): $(OPS_DEPS_STAMP)
	PYTHONPATH=workflow $(VENV)/bin/python -m zerogate.runtime.ops
	touch $(OPS_STAMP)

setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(OPS_STAMP)

run: setup
	snakemake --cores all

test: setup
	pytest

# Lint: Snakemake's own, ruff (lint and format) on the Python sources, snakefmt on the Snakefile and the rules.
# `make format` rewrites the files the same tools check.
SNAKE_FILES := Snakefile workflow/rules
lint: setup
	snakemake --lint
	ruff check workflow tests
	ruff format --check workflow tests
	snakefmt --check $(SNAKE_FILES)

format: setup
	ruff check --fix workflow tests
	ruff format workflow tests
	snakefmt $(SNAKE_FILES)

# Every run under results/ (or config's `compare` list) side by side in one HTML report.
compare: setup
	snakemake --cores all compare

clean:
	rm -rf .snakemake results/*/

# One plan: a model on a box, printed on the console (workflow/rules/plan_model.smk, docs/planning.md):
#   make plan MODEL=qwen3-8b BOX=2xRTX3090 HOST_RAM=128GiB [HOST_CPU='AMD Ryzen 9 5950X'] [ZERO=3] [OFFLOAD=cpu|none|optimizer|nvme-optimizer|nvme]
#             [MICRO_BATCH=1] [ACCUMULATION=1] [SEQ_LEN=512] [CHECKPOINTING=true] [ATTENTION=auto|sdpa|eager]
# Each variable given becomes the --config key of the same name in lower case.
PLAN_KEYS := model:MODEL box:BOX host_ram:HOST_RAM host_cpu:HOST_CPU zero:ZERO offload:OFFLOAD micro_batch:MICRO_BATCH \
	accumulation:ACCUMULATION seq_len:SEQ_LEN checkpointing:CHECKPOINTING attention:ATTENTION
plan_key = $(word $(2),$(subst :, ,$(1)))
PLAN_CONFIG = $(foreach kv,$(PLAN_KEYS),$(if $($(call plan_key,$(kv),2)),$(call plan_key,$(kv),1)='$($(call plan_key,$(kv),2))'))
plan: setup
	snakemake --cores 1 plan_model --quiet all --config $(PLAN_CONFIG)

# Benchmarks: figures printed and written to results/bench/<machine>/bench/, not tests. Snakemake targets
# (workflow/rules/bench.smk) on the pipeline's own rules, profile `bench` (the default in 60 steps).
# BENCH_CONFIG adds --config entries, e.g. make bench BENCH_CONFIG="bench_repeats=1".
BENCH := snakemake --cores all --config profile=bench $(BENCH_CONFIG) --
.PHONY: bench bench-ddp-vs-zero3 bench-metrics-overhead bench-gloo-latency bench-peers bench-planner-grid
bench: setup
	$(BENCH) bench

bench-ddp-vs-zero3: setup
	$(BENCH) bench_ddp_vs_zero3

bench-metrics-overhead: setup
	$(BENCH) bench_metrics_overhead

bench-gloo-latency: setup
	$(BENCH) bench_gloo_latency

# ZeRO's peers (FSDP2, with and without its offload) against ZeRO-3, six variant runs: not part of `bench`.
bench-peers: setup
	$(BENCH) bench_peers_vs_zero3

# The planner's memory prediction against short CPU training runs (config/planner_grid.yaml: ZeRO 0-3,
# offloads, micro-batch, sequence, checkpointing, attention, three architectures), each point's ledger table
# level by level; 22-36 minutes on 2 shared cores (docs/planning.md, "The planner against a grid of runs").
bench-planner-grid: setup
	$(BENCH) bench_planner_grid

# Mutation score of the judging code (mutmut, about 45 minutes on 2 cores): not part of `bench` or
# CI; mutmut comes from envs/requirements-bench.txt.
.PHONY: bench-mutation
bench-mutation: setup
	$(PIP_PINNED) -r envs/requirements-bench.txt
	PYTHONPATH=workflow python -m zerogate.bench.mutation

# The GPU check's kit (docs/gpu-kit.md): the wheels the lent GPU machine's image lacks, into build/gpu-kit/,
# then checked (they resolve against the image's packages, envs/gpu-image.txt, and fit one device call with
# the repository). Downloads: CI never runs it. gpu-check-cpu runs the check's CPU mode, as its test does.
.PHONY: gpu-kit gpu-check-cpu
gpu-kit: setup
	python -m tests.gpu.kit

gpu-check-cpu: setup
	python tests/gpu/gpu_check.py --cpu --out results/gpu-check-cpu
