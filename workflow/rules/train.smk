# Like every stage that prepares a training run, only for an approved plan (a refused run writes nothing
# under train/).
rule write_train_settings:
    input:
        approved=rules.approve_plan.output.approved,
    output:
        settings=result("train/settings.json"),
    params:
        # What the training loop acts on besides the run spec; the judging rules read the file too, so the
        # spike rule the gates count by is the one the run was stabilised by.
        stabiliser=plain(SETTINGS.stabiliser),
        checkpoint=plain(SETTINGS.checkpoint),
        evaluation=plain(SETTINGS.evaluation),
    log:
        result("logs/write_train_settings.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/write_train_settings.py"


# Checkpoints go to results/<profile>/<machine>/checkpoints/, deliberately not an output: Snakemake
# deletes a failed job's outputs, and a rerun of this rule resumes from the newest complete checkpoint.
# The ranks' thread pools share the host's cores (zerogate.plan.ds_config.thread_env), hence threads; the
# timed run holds the whole host share, so no other job of this invocation runs beside it. runtime and
# mem_mb are for cluster executors (set them per machine in the workflow profile, profiles/default).
rule train:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        metrics=directory(result("train/metrics")),
        events=result("train/events.jsonl"),
        evaluation=result("train/eval.jsonl"),
        summary=result("train/summary.json"),
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=checkpoint_dir,
        extra="",
    log:
        result("logs/train.log"),
    benchmark:
        result("benchmarks/train.tsv")
    threads: host_cores()
    resources:
        host_share=HOST_SHARE_POOL,
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zerogate.runtime.launch --run-spec {input.run_spec} --log {log} --module zerogate.train.loop --"
        " --ds-config {input.ds_config} --settings {input.settings} --dataset-dir {params.dataset_dir}"
        " --out-dir {params.out_dir} --checkpoint-dir {params.checkpoint_dir} {params.extra}"


# Repeats (profile key `repeats`): the same run trained again with seed training.seed + k, each a complete
# run with its own records, checkpoints and log under repeats/<k>/; the timing statistics pool them.
rule write_repeat_run_spec:
    input:
        run_spec=rules.render_deepspeed_config.output.run_spec,
    output:
        run_spec=result("repeats/{repeat}/deepspeed/run_spec.json"),
    log:
        result("logs/write_repeat_run_spec/{repeat}.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/write_repeat_run_spec.py"


use rule train as train_repeat with:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.write_repeat_run_spec.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        metrics=directory(result("repeats/{repeat}/train/metrics")),
        events=result("repeats/{repeat}/train/events.jsonl"),
        evaluation=result("repeats/{repeat}/train/eval.jsonl"),
        summary=result("repeats/{repeat}/train/summary.json"),
    log:
        result("logs/train_repeat/{repeat}.log"),
    benchmark:
        result("benchmarks/train_repeat/{repeat}.tsv")


# Comparison runs (profile key `variants`): the same model, data and loop under ZeRO stage 0-3, with and
# without offload. `snakemake --cores all train_variants` trains every listed variant and tabulates them.
rule render_variant_config:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
    output:
        ds_config=result("variants/{variant}/deepspeed/ds_config.json"),
        overrides=result("variants/{variant}/deepspeed/overrides.json"),
    log:
        result("logs/render_variant_config/{variant}.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/render_variant_config.py"


# A variant trains only for an approved plan, like the run itself (the planner's refusal holds for all).
use rule train as train_variant with:
    input:
        ds_config=rules.render_variant_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        metrics=directory(result("variants/{variant}/train/metrics")),
        events=result("variants/{variant}/train/events.jsonl"),
        evaluation=result("variants/{variant}/train/eval.jsonl"),
        summary=result("variants/{variant}/train/summary.json"),
    log:
        result("logs/train_variant/{variant}.log"),
    benchmark:
        result("benchmarks/train_variant/{variant}.tsv")


rule compare_variants:
    input:
        summaries=variant_summaries,
        metrics=variant_metrics,
        settings=rules.write_train_settings.output.settings,
    output:
        table=result("variants/comparison.json"),
    params:
        variants=PROFILE.get("variants", []),
        warmup_steps=WARMUP_STEPS,
        expected_steps=SETTINGS.training.optimizer_steps,
    log:
        result("logs/compare_variants.log"),
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/compare_variants.py"


rule train_variants:
    input:
        rules.compare_variants.output.table,
    localrule: True
