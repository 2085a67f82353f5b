# Like every stage that prepares a training run, only for an approved plan (a refused run writes nothing
# under train/).
rule write_train_settings:
    input:
        approved=rules.approve_plan.output.approved,
    output:
        settings=result("train/settings.json"),
    log:
        result("logs/write_train_settings.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    params:
        # What the training loop acts on besides the run spec; the judging rules read the file too, so the
        # spike rule the gates count by is the one the run was stabilised by.
        stabiliser=plain(SETTINGS.stabiliser),
        checkpoint=plain(SETTINGS.checkpoint),
        evaluation=plain(SETTINGS.evaluation),
    script:
        "../scripts/write_train_settings.py"


# Checkpoints go to results/<profile>/<machine>/checkpoints/, deliberately not an output: Snakemake
# deletes a failed job's outputs, and a rerun of this rule resumes from the newest complete checkpoint.
# The ranks' thread pools share the host's cores (zerogate.render.world.thread_env), hence threads; the
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
    log:
        result("logs/train.log"),
    benchmark:
        result("benchmarks/train.tsv")
    conda:
        "../../envs/train.yaml"
    threads: host_cores()
    resources:
        host_share=HOST_SHARE_POOL,
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=checkpoint_dir,
        extra="",
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
