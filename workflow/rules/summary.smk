# The run's statistics, computed once (zerogate.analysis.summary.summarise): what check_gates, plot_figures,
# write_report, register_run and compare read. The warm-up and the interval settings are params, the spike
# rule the run's own settings file: editing them re-summarises and re-judges, never retrains.
rule summarise_run:
    input:
        steps=rules.parse_logs.output.steps,
        events=rules.parse_logs.output.events,
        run_meta=rules.parse_logs.output.run_meta,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        repeat_steps=repeat_outputs("steps"),
        repeat_run_meta=repeat_outputs("run_meta"),
    output:
        summary=result("summary/run.json"),
    log:
        result("logs/summarise_run.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        warmup_steps=WARMUP_STEPS,
        intervals=INTERVALS,
    script:
        "../scripts/summarise_run.py"


# The same for each trained variant (profile key `variants`), from the records its training run wrote:
# the rows of compare_variants' table.
rule summarise_variant:
    input:
        metrics=rules.train_variant.output.metrics,
        summary=rules.train_variant.output.summary,
        run_spec=rules.write_variant_run_spec.output.run_spec,
        settings=rules.write_train_settings.output.settings,
    output:
        summary=result("variants/{variant}/summary/run.json"),
    log:
        result("logs/summarise_variant/{variant}.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        warmup_steps=WARMUP_STEPS,
        intervals=INTERVALS,
    script:
        "../scripts/summarise_variant.py"
