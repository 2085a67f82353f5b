# Each rank's predicted peak memory (zerogate.predict.peak.peak_prediction), beside the plan and not part
# of it: training depends on the plan (approve_plan), and the runtime baseline is a noisy measurement, so
# re-measuring it must re-predict and re-judge, never retrain. The ledger table (compare_ledger) sets the
# prediction against the measured peaks.
#
# The runtime's own resident set, the CPU prediction's baseline: a throw-away interpreter with the training
# ranks' imports, DeepSpeed's accelerator and backend initialised and an engine from the run's config
# stepped once on a 72-parameter model, the run's training split read, with the run's thread settings. A measurement, so
# it holds the whole host share like the probe.
rule measure_runtime_baseline:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        train_split=rules.prepare_dataset.output.train,
    output:
        baseline=result("plan/runtime_baseline.json"),
    log:
        result("logs/measure_runtime_baseline.log"),
    conda:
        "../../envs/train.yaml"
    resources:
        host_share=HOST_SHARE_POOL,
    script:
        "../scripts/measure_runtime_baseline.py"


rule predict_peak_memory:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        baseline=rules.measure_runtime_baseline.output.baseline,
    output:
        peak=result("plan/peak_memory.json"),
    log:
        result("logs/predict_peak_memory.log"),
    conda:
        "../../envs/train.yaml"
    params:
        engine="deepspeed",  # a variant's (variants.smk): its engine's planner (zerogate.predict.planner)
    script:
        "../scripts/predict_peak_memory.py"
