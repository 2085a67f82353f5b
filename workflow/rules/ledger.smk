# Ledger vs measured: what each rank held (and on GPUs its allocator peaks) against the prediction.
rule compare_ledger:
    input:
        metrics="results/{profile}/{machine}/train/metrics",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        steps="results/{profile}/{machine}/parsed/steps.parquet",
    output:
        table="results/{profile}/{machine}/ledger/ledger_vs_measured.json",
    params:
        model=PROFILE["model"],
    log:
        "results/{profile}/{machine}/logs/compare_ledger.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/compare_ledger.py"
