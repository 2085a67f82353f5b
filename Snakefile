# zerogate: reproduce, measure and gate the claims of a DeepSpeed ZeRO-3 fine-tuning paper.
#
#   snakemake --cores all                          # the default profile (config/config.yaml)
#   snakemake --cores all --config profile=smoke   # another profile
#   snakemake --cores all -R check_gates           # re-judge the existing run, no retraining
#   snakemake --cores all --config profile=bench -- bench   # the benchmarks (make bench)
#
# Stages: probe_hardware -> render_deepspeed_config -> plan_run, check_preflight -> approve_plan
#         -> prepare_model -> prepare_dataset -> train -> parse_logs -> summarise_run
#         -> check_gates -> plot_figures / record_provenance -> write_report -> register_run
# Each .smk cites rules of the files included before it (rules.X.output.Y), hence this order.
from snakemake.utils import min_version

min_version("9.27")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/deepspeed.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/plan_model.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/dataset.smk"
include: "workflow/rules/peak.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/comms.smk"
include: "workflow/rules/variants.smk"
include: "workflow/rules/parse.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/ledger.smk"
include: "workflow/rules/gates.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/judge_log.smk"
include: "workflow/rules/validate_planner.smk"


rule all:
    default_target: True
    input:
        final_targets(),
