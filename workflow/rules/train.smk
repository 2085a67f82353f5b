rule write_train_settings:
    output:
        settings="results/{profile}/{machine}/train/settings.json",
    params:
        stabiliser=PROFILE.get("stabiliser", {}),
        checkpoint=PROFILE.get("checkpoint", {}),
    log:
        "results/{profile}/{machine}/logs/write_train_settings.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/write_train_settings.py"


# Checkpoints go to results/{profile}/{machine}/checkpoints/, deliberately not an output: Snakemake
# deletes a failed job's outputs, and a rerun of this rule resumes from the newest complete checkpoint.
rule train:
    input:
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        settings="results/{profile}/{machine}/train/settings.json",
        train="results/{profile}/{machine}/dataset/train.parquet",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
        plan="results/{profile}/{machine}/plan/approved.json",
    output:
        metrics=directory("results/{profile}/{machine}/train/metrics"),
        events="results/{profile}/{machine}/train/events.jsonl",
        evaluation="results/{profile}/{machine}/train/eval.jsonl",
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
        "python -m zerogate.train.launch --run-spec {input.run_spec} --log {log} --"
        " --ds-config {input.ds_config} --settings {input.settings} --dataset-dir {params.dataset_dir}"
        " --out-dir {params.out_dir} --checkpoint-dir {params.checkpoint_dir}"


# Comparison runs (profile key `variants`): the same model, data and loop under ZeRO stage 0-3, with and
# without offload. `snakemake --cores all compare_variants` trains every listed variant and tabulates them.
rule render_variant_config:
    input:
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
    output:
        ds_config="results/{profile}/{machine}/variants/{variant}/deepspeed/ds_config.json",
        overrides="results/{profile}/{machine}/variants/{variant}/deepspeed/overrides.json",
    log:
        "results/{profile}/{machine}/logs/render_variant_config/{variant}.log",
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/render_variant_config.py"


use rule train as train_variant with:
    input:
        ds_config="results/{profile}/{machine}/variants/{variant}/deepspeed/ds_config.json",
        run_spec="results/{profile}/{machine}/deepspeed/run_spec.json",
        settings="results/{profile}/{machine}/train/settings.json",
        train="results/{profile}/{machine}/dataset/train.parquet",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
    output:
        metrics=directory("results/{profile}/{machine}/variants/{variant}/train/metrics"),
        events="results/{profile}/{machine}/variants/{variant}/train/events.jsonl",
        evaluation="results/{profile}/{machine}/variants/{variant}/train/eval.jsonl",
        summary="results/{profile}/{machine}/variants/{variant}/train/summary.json",
    log:
        "results/{profile}/{machine}/logs/train_variant/{variant}.log",
    benchmark:
        "results/{profile}/{machine}/benchmarks/train_variant/{variant}.tsv"


rule compare_variants:
    input:
        summaries=variant_summaries,
    output:
        table="results/{profile}/{machine}/variants/comparison.json",
    params:
        variants=PROFILE.get("variants", []),
    log:
        "results/{profile}/{machine}/logs/compare_variants.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/compare_variants.py"


rule train_variants:
    input:
        f"results/{PROFILE_NAME}/{MACHINE}/variants/comparison.json",
