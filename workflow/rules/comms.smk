# Communication volume per scheme: torch DDP and DeepSpeed ZeRO-0..3 (with offloads), each at accumulation 1
# and at the profile's, in short runs of their own under one launcher start (zerogate.train.comms_volume).
# DeepSpeed's comms logger synchronises every collective, so these runs are never the timed run; they hold
# the host like it (threads, host_share). The table sets each scheme's measured volume beside the theory of
# zerogate.predict.comms (zerogate.analysis.comms). What to measure is the planning side's: the config of each
# scheme rendered by zerogate.render.comms_runs, the theory's settings by zerogate.predict.comms_plan.
rule plan_comms_measurements:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
    output:
        measurements=result("comms/measurements.json"),
    log:
        result("logs/plan_comms_measurements.log"),
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/plan_comms_measurements.py"


rule measure_comms_volume:
    input:
        measurements=rules.plan_comms_measurements.output.measurements,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        records=directory(result("comms/records")),
    log:
        result("logs/measure_comms_volume.log"),
    benchmark:
        result("benchmarks/measure_comms_volume.tsv")
    conda:
        "../../envs/train.yaml"
    threads: host_cores()
    resources:
        host_share=HOST_SHARE_POOL,
    params:
        dataset_dir=subpath(input.manifest, parent=True),
    shell:
        "python -m zerogate.runtime.launch --run-spec {input.run_spec} --log {log} --module zerogate.train.comms_volume --"
        " --measurements {input.measurements} --dataset-dir {params.dataset_dir} --out-dir {output.records}"


rule tabulate_comms_volume:
    input:
        records=rules.measure_comms_volume.output.records,
    output:
        table=result("comms/volume.json"),
    log:
        result("logs/tabulate_comms_volume.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tabulate_comms_volume.py"
