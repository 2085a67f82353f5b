rule parse_logs:
    input:
        metrics="results/{profile}/{machine}/train/metrics",
        summary="results/{profile}/{machine}/train/summary.json",
        launcher_log="results/{profile}/{machine}/logs/train.log",
        stabiliser_events="results/{profile}/{machine}/train/events.jsonl",
    output:
        steps="results/{profile}/{machine}/parsed/steps.parquet",
        events="results/{profile}/{machine}/parsed/events.parquet",
        run_meta="results/{profile}/{machine}/parsed/run.json",
    params:
        expected_steps=PROFILE["training"]["optimizer_steps"],
    log:
        "results/{profile}/{machine}/logs/parse_logs.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/parse_logs.py"
