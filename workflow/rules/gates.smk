rule check_gates:
    input:
        plan="results/{profile}/{machine}/plan/plan.json",
        steps="results/{profile}/{machine}/parsed/steps.parquet",
        events="results/{profile}/{machine}/parsed/events.parquet",
        run_meta="results/{profile}/{machine}/parsed/run.json",
        summary="results/{profile}/{machine}/train/summary.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        deviations="results/{profile}/{machine}/deepspeed/deviations.json",
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
    output:
        verdicts="results/{profile}/{machine}/gates/verdicts.json",
    params:
        gates=PROFILE["gates"],
        warmup_steps=PROFILE["training"]["warmup_steps_excluded"],
        stabiliser=STABILISER_SETTINGS,
    log:
        "results/{profile}/{machine}/logs/check_gates.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/check_gates.py"


# With `strict: true` this runs last and fails the invocation on any FAIL. It is a separate rule so that
# the verdicts and the report, outputs of jobs that succeeded, stay on disk for the user to read.
rule enforce_gates:
    input:
        verdicts="results/{profile}/{machine}/gates/verdicts.json",
        report="results/{profile}/{machine}/report/zerogate-v{version}-{run_id}-{date}.html",
    output:
        passed="results/{profile}/{machine}/gates/strict-v{version}-{run_id}-{date}.passed",
    log:
        "results/{profile}/{machine}/logs/enforce_gates-v{version}-{run_id}-{date}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/enforce_gates.py"
