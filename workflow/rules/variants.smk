# Comparison runs (profile key `variants`): the same model, data and loop under ZeRO stage 0-3, with and
# without offload, and ZeRO's peers (FSDP2, with and without its offload) through the same loop with their own
# engine (zerogate.render.variants.PEERS). `snakemake --cores all train_variants` trains every listed variant
# and tabulates them.
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


# The comparison runs' run spec: the run's own with VARIANT_STEPS optimizer steps (profile key
# variant_optimizer_steps); the same model, data, seed and geometry.
rule write_variant_run_spec:
    input:
        run_spec=rules.render_deepspeed_config.output.run_spec,
    output:
        run_spec=result("variants/deepspeed/run_spec.json"),
    log:
        result("logs/write_variant_run_spec.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    params:
        optimizer_steps=VARIANT_STEPS,
    script:
        "../scripts/write_variant_run_spec.py"


# A variant trains only for an approved plan, like the run itself (the planner's refusal holds for all); a
# peer with its engine (variant_engine_argument).
use rule train as train_variant with:
    input:
        ds_config=rules.render_variant_config.output.ds_config,
        run_spec=rules.write_variant_run_spec.output.run_spec,
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
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=checkpoint_dir,
        extra=variant_engine_argument,


# The planner's peak for a variant's config (predict_peak_memory on it, the run's runtime baseline): the
# table's predicted column; FSDP2's by its own terms (zerogate.predict.fsdp2_terms.fsdp2_terms).
use rule predict_peak_memory as predict_variant_peak_memory with:
    input:
        ds_config=rules.render_variant_config.output.ds_config,
        run_spec=rules.write_variant_run_spec.output.run_spec,
        baseline=rules.measure_runtime_baseline.output.baseline,
    output:
        peak=result("variants/{variant}/plan/peak_memory.json"),
    log:
        result("logs/predict_variant_peak_memory/{variant}.log"),
    params:
        engine=lambda wildcards: engine_of(wildcards.variant),


rule compare_variants:
    input:
        summaries=variant_summaries,
        metrics=variant_metrics,
        run_summaries=variant_run_summaries,
        peaks=variant_peaks,
        communication=rules.tabulate_comms_volume.output.table,
        run_spec=rules.write_variant_run_spec.output.run_spec,
    output:
        table=result("variants/comparison.json"),
    log:
        result("logs/compare_variants.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        variants=trained(PROFILE.get("variants", [])),
        not_run=[v for v in PROFILE.get("variants", []) if v not in trained([v])],
        predicted=predicted_variants(),
    script:
        "../scripts/compare_variants.py"


rule plot_variant_losses:
    input:
        metrics=variant_metrics,
    output:
        loss=report(
            result("variants/figures/loss.png"),
            caption="../report/variant_losses.rst",
            category="Variants",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
    log:
        result("logs/plot_variant_losses.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        variants=trained(PROFILE.get("variants", [])),
    script:
        "../scripts/plot_variant_losses.py"


rule train_variants:
    input:
        rules.compare_variants.output.table,
        rules.plot_variant_losses.output.loss,
    localrule: True
