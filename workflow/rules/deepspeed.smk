rule render_deepspeed_config:
    input:
        template=PROFILE["deepspeed"]["template"],
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
    output:
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        deviations="results/{profile}/{machine}/deepspeed/deviations.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
    params:
        model=PROFILE["model"],
        training=PROFILE["training"],
        deepspeed=PROFILE["deepspeed"],
    log:
        "results/{profile}/{machine}/logs/render_deepspeed_config.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/render_deepspeed_config.py"
