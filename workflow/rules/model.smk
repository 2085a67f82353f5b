# Only for an approved plan (a flag input, not read): a run the planner or the pre-flight check refuses
# loads no model and prepares no data.
rule prepare_model:
    input:
        approved=rules.approve_plan.output.approved,
    output:
        model=result("model/model.json"),
    log:
        result("logs/prepare_model.log"),
    conda:
        "../../envs/train.yaml"
    params:
        model=plain(SETTINGS.model),
        profile_file=profile_file_setting("model.source"),
    script:
        "../scripts/prepare_model.py"
