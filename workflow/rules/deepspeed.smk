# The claim's DeepSpeed config rendered for this machine (probed) or a described one (machine_description:
# config/machines/<name>.yaml, never probed). The planner reads this rendering; there is no other.
rule render_deepspeed_config:
    input:
        unpack(machine_input),
        template=SETTINGS.deepspeed.template,
        hostfile=nodes_hostfile(),
    output:
        ds_config=result("deepspeed/ds_config.json"),
        deviations=result("deepspeed/deviations.json"),
        run_spec=result("deepspeed/run_spec.json"),
    log:
        result("logs/render_deepspeed_config.log"),
    conda:
        "../../envs/train.yaml"
    params:
        model=plain(SETTINGS.model),
        # The run's training settings: the analysis-only warm-up cut left out, so editing it never re-renders.
        training=plain(SETTINGS.training.run),
        overrides=SETTINGS.deepspeed.overrides,
        seq_len=SETTINGS.dataset.seq_len,
        vocab_size=SETTINGS.vocab_size,
        machine=MACHINE,
        nodes=PROFILE.get("nodes"),
        nodes_file=profile_file_setting("nodes"),
        profile_file=profile_file_setting("deepspeed.overrides"),
        batch_file=profile_file_setting("training.train_batch_size"),
    script:
        "../scripts/render_deepspeed_config.py"
