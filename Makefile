# make run   — create .venv (pinned versions) and run the default pipeline end to end
# make test  — create .venv and run the test suite
# make compare — compare the runs under results/ (machines and profiles side by side)
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
# Rules call `python`, `deepspeed` and `snakemake`: take them from the project's environment.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup run test lint compare clean

$(STAMP): envs/requirements.txt envs/requirements-nodeps.txt envs/constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -c envs/constraints.txt -r envs/requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps -r envs/requirements-nodeps.txt
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

run: setup
	snakemake --cores all

test: setup
	pytest

lint: setup
	snakemake --lint

# Every run under results/ (or config's `compare` list) side by side in one HTML report.
compare: setup
	snakemake --cores all compare

clean:
	rm -rf .snakemake results/*/

# Benchmarks (issue 4): figures printed, not tests. Each prepares its own data under /tmp.
.PHONY: bench bench-ddp-vs-zero3 bench-metrics-overhead bench-gloo-latency
bench: bench-ddp-vs-zero3 bench-metrics-overhead bench-gloo-latency

bench-ddp-vs-zero3: setup
	PYTHONPATH=workflow python -m zerogate.bench.ddp_vs_zero3

bench-metrics-overhead: setup
	PYTHONPATH=workflow python -m zerogate.bench.metrics_overhead

bench-gloo-latency: setup
	PYTHONPATH=workflow python -m zerogate.bench.gloo_latency

# Mutation score of the judging code (issue 14; mutmut, tens of minutes): not part of `bench` or CI.
.PHONY: bench-mutation
bench-mutation: setup
	PYTHONPATH=workflow python -m zerogate.bench.mutation
