# A launcher log judged on its own: `snakemake --cores 1 judge_log --config log=PATH` (several:
# log=[A,B]). The log may come from another machine, a colleague or a published write-up, or be a zerogate
# launcher log (results/<profile>/<machine>/logs/train.log). Nothing is trained, probed or planned: the
# rule reads the log files only and judges them against the profile's gates (zerogate.analysis.log_gates).
# Each log's results go to results/logs/<name>/, <name> its file's stem (zerogate.analysis.log_input);
# a missing, empty or binary log stops the invocation with one line before any job runs.
from zerogate.analysis import log_input

LOGS_TO_JUDGE = log_input.result_names(log_input.given_logs(RUN_CONFIG.log))


rule judge_log:
    input:
        unpack(lambda wildcards: log_input.rule_inputs(LOGS_TO_JUDGE, config_source(["log"]), fail)),
    output:
        summaries=[f"results/logs/{name}/log_summary.json" for name in LOGS_TO_JUDGE],
        pages=[f"results/logs/{name}/log_summary.html" for name in LOGS_TO_JUDGE],
    log:
        "results/logs/judge_log.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        names=list(LOGS_TO_JUDGE),
        gates=plain(SETTINGS.gates),
        warmup_steps=WARMUP_STEPS,
        profile=PROFILE_NAME,
    script:
        "../scripts/judge_log.py"
