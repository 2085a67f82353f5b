# The planner: ledger + throughput floor against this machine (probed) or a described one
# (--config machine_description=config/machines/<name>.yaml). plan.json is written either way (it is the
# on-paper verdict); approve_plan fails, writing nothing, when the run does not fit and the profile does
# not override, and training depends on its approved.json.
rule plan_run:
    input:
        unpack(plan_machine_input),
        template=PROFILE["deepspeed"]["template"],
    output:
        plan="results/{profile}/{machine}/plan/plan.json",
        ds_config="results/{profile}/{machine}/plan/ds_config.json",
    params:
        # Not the gates: editing a gate must not re-plan, because training depends on the plan.
        sections=profile_sections("model", "dataset", "training", "plan"),
        deepspeed=PROFILE["deepspeed"],
    log:
        "results/{profile}/{machine}/logs/plan_run.log",
    # Before anything else starts, so that a refused run has launched nothing (seconds, not minutes).
    threads: workflow.cores
    priority: 100
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/plan_run.py"


rule approve_plan:
    input:
        plan="results/{profile}/{machine}/plan/plan.json",
    output:
        approved="results/{profile}/{machine}/plan/approved.json",
    log:
        "results/{profile}/{machine}/logs/approve_plan.log",
    threads: workflow.cores
    priority: 100
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/approve_plan.py"


rule judge_plan_claims:
    input:
        plan="results/{profile}/{machine}/plan/plan.json",
    output:
        claims="results/{profile}/{machine}/plan/claims.json",
        summary="results/{profile}/{machine}/plan/plan.txt",
    params:
        gates=PROFILE["gates"],
    log:
        "results/{profile}/{machine}/logs/judge_plan_claims.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/judge_plan_claims.py"


rule plan:
    input:
        plan_target(),
