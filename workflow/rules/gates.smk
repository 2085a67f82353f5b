rule check_gates:
    input:
        plan=rules.replan_with_measured_compute.output.plan,
        steps=rules.parse_logs.output.steps,
        events=rules.parse_logs.output.events,
        run_meta=rules.parse_logs.output.run_meta,
        summary=rules.train.output.summary,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        deviations=rules.render_deepspeed_config.output.deviations,
        fingerprint=rules.probe_hardware.output.fingerprint,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        settings=rules.write_train_settings.output.settings,
        repeat_steps=repeat_outputs("steps"),
    output:
        verdicts=result("gates/verdicts.json"),
    params:
        gates=plain(SETTINGS.gates),
        warmup_steps=WARMUP_STEPS,
        intervals=INTERVALS,
    log:
        result("logs/check_gates.log"),
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/check_gates.py"

