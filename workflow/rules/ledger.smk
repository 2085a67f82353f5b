# Ledger vs measured: what each rank held (and on GPUs its allocator peaks) against the prediction.
rule compare_ledger:
    input:
        metrics=rules.train.output.metrics,
        steps=rules.parse_logs.output.steps,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        peak=rules.predict_peak_memory.output.peak,
    output:
        table=result("ledger/ledger_vs_measured.json"),
    log:
        result("logs/compare_ledger.log"),
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/compare_ledger.py"
