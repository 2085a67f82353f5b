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
    log:
        result("logs/parse_logs.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        expected_steps=SETTINGS.training.optimizer_steps,
    script:
        "../scripts/parse_logs.py"


use rule parse_logs as parse_repeat_logs with:
    input:
        metrics=rules.train_repeat.output.metrics,
        summary=rules.train_repeat.output.summary,
        launcher_log=rules.train_repeat.log[0],
        stabiliser_events=rules.train_repeat.output.events,
    output:
        steps=result("repeats/{repeat}/parsed/steps.parquet"),
        events=result("repeats/{repeat}/parsed/events.parquet"),
        run_meta=result("repeats/{repeat}/parsed/run.json"),
    log:
        result("logs/parse_repeat_logs/{repeat}.log"),
