rule train:
    input:
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        train="results/{profile}/{machine}/dataset/train.parquet",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
        plan="results/{profile}/{machine}/plan/approved.json",
    output:
        metrics=directory("results/{profile}/{machine}/train/metrics"),
        summary="results/{profile}/{machine}/train/summary.json",
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
    log:
        "results/{profile}/{machine}/logs/train.log",
    benchmark:
        "results/{profile}/{machine}/benchmarks/train.tsv"
    # All cores: nothing else may run beside the timed training run.
    threads: workflow.cores
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zerogate.launch --run-spec {input.run_spec} --log {log} --"
        " --ds-config {input.ds_config} --dataset-dir {params.dataset_dir} --out-dir {params.out_dir}"
