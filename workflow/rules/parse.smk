rule parse_logs:
    input:
        metrics=rules.train.output.metrics,
        summary=rules.train.output.summary,
        launcher_log=rules.train.log[0],
        stabiliser_events=rules.train.output.events,
    output:
        steps=result("parsed/steps.parquet"),
        events=result("parsed/events.parquet"),
        run_meta=result("parsed/run.json"),
    params:
        expected_steps=SETTINGS.training.optimizer_steps,
    log:
        result("logs/parse_logs.log"),
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/parse_logs.py"
