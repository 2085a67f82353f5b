"""Benchmarks that print figures (`make bench`: Snakemake targets in workflow/rules/bench.smk); not tests.

The runs are the pipeline's own (prepare_dataset, render_deepspeed_config, render_variant_config, the
train rule); these modules only tabulate them, with the step statistic of zerogate.analysis.measures."""
