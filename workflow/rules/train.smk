rule write_train_plan:
    output:
        plan="results/{profile}/{machine}/plan/train.json",
    params:
        stabiliser=PROFILE.get("stabiliser", {}),
        checkpoint=PROFILE.get("checkpoint", {}),
    log:
        "results/{profile}/{machine}/logs/write_train_plan.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/write_train_plan.py"


# Checkpoints go to results/{profile}/{machine}/checkpoints/, deliberately not an output: Snakemake
# deletes a failed job's outputs, and a rerun of this rule resumes from the newest complete checkpoint.
rule train:
    input:
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        plan="results/{profile}/{machine}/plan/train.json",
        train="results/{profile}/{machine}/dataset/train.parquet",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
    output:
        metrics=directory("results/{profile}/{machine}/train/metrics"),
        events="results/{profile}/{machine}/train/events.jsonl",
        summary="results/{profile}/{machine}/train/summary.json",
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=checkpoint_dir,
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
        " --ds-config {input.ds_config} --plan {input.plan} --dataset-dir {params.dataset_dir}"
        " --out-dir {params.out_dir} --checkpoint-dir {params.checkpoint_dir}"
