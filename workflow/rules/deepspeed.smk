# The claim's DeepSpeed config rendered for this machine (probed) or a described one (machine_description:
# config/machines/<name>.yaml, never probed). The planner reads this rendering; there is no other.
rule render_deepspeed_config:
    input:
        unpack(machine_input),
        template=PROFILE["deepspeed"]["template"],
        hostfile=nodes_hostfile(),
    output:
        ds_config=result("deepspeed/ds_config.json"),
        deviations=result("deepspeed/deviations.json"),
        run_spec=result("deepspeed/run_spec.json"),
    params:
        model=PROFILE["model"],
        training=run_training_section(PROFILE["training"]),
        deepspeed=PROFILE["deepspeed"],
        machine=MACHINE,
        nodes=PROFILE.get("nodes"),
        nodes_file=profile_file_setting("nodes"),
    log:
        result("logs/render_deepspeed_config.log"),
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/render_deepspeed_config.py"
