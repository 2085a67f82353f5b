rule check_preflight:
    input:
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
    output:
        preflight="results/{profile}/{machine}/preflight/preflight.json",
    params:
        needs=PROFILE.get("preflight"),
        profile_name=PROFILE_NAME,
    log:
        "results/{profile}/{machine}/logs/check_preflight.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/check_preflight.py"


rule prepare_model:
    input:
        preflight="results/{profile}/{machine}/preflight/preflight.json",
    output:
        model="results/{profile}/{machine}/model/model.json",
    params:
        model=PROFILE["model"],
        repo=str(REPO),
        profile_file=profile_file_setting("model.source"),
    log:
        "results/{profile}/{machine}/logs/prepare_model.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/prepare_model.py"
