# The benchmarks (`make bench`: targets bench, bench_ddp_vs_zero3, bench_metrics_overhead,
# bench_gloo_latency, bench_planner_grid), run on the pipeline's own rules: the profile's dataset, its rendered DeepSpeed config
# and the variants' (render_variant_config), the approved plan, and the train rule's command. Figures are
# printed and written to results/<profile>/<machine>/bench/. The profile `bench` (the default profile in 60
# steps, no checkpoints) is what `make bench` runs; config key bench_repeats sets the runs per row.
# Runs are sequential (each holds the host), not interleaved: rerun to see the spread between runs.
rule render_untuned_config:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
    output:
        ds_config=result("bench/zero3-untuned/ds_config.json"),
        overrides=result("bench/zero3-untuned/overrides.json"),
    log:
        result("logs/bench/render_untuned_config.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    params:
        hidden_size=SETTINGS.model.hidden_size,
    script:
        "../scripts/render_untuned_config.py"


# One benchmark run: the train rule with another DeepSpeed config (bench_ds_config) or with the metrics
# layer off (bench_extra), repeat {repeat} of row {bench_row}.
use rule train as train_bench_run with:
    input:
        ds_config=bench_ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        metrics=directory(result("bench/runs/{bench_row}/{repeat}/metrics")),
        events=result("bench/runs/{bench_row}/{repeat}/events.jsonl"),
        evaluation=result("bench/runs/{bench_row}/{repeat}/eval.jsonl"),
        summary=result("bench/runs/{bench_row}/{repeat}/summary.json"),
    log:
        result("logs/bench/{bench_row}-{repeat}.log"),
    benchmark:
        result("benchmarks/bench/{bench_row}-{repeat}.tsv")
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=checkpoint_dir,
        extra=bench_extra,


# The DDP baseline: the training run's loop with the DDP engine (torch DDP, no_sync accumulation) under the
# same launcher, run spec, data and optimizer settings, the same model (pretrained where the profile's is).
use rule train as train_ddp_baseline with:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        settings=rules.write_train_settings.output.settings,
        train=rules.prepare_dataset.output.train,
        manifest=rules.prepare_dataset.output.manifest,
        plan=rules.approve_plan.output.approved,
    output:
        metrics=directory(result("bench/runs/ddp/{repeat}/metrics")),
        events=result("bench/runs/ddp/{repeat}/events.jsonl"),
        evaluation=result("bench/runs/ddp/{repeat}/eval.jsonl"),
        summary=result("bench/runs/ddp/{repeat}/summary.json"),
    log:
        result("logs/bench/ddp-{repeat}.log"),
    benchmark:
        result("benchmarks/bench/ddp-{repeat}.tsv")
    params:
        dataset_dir=subpath(input.manifest, parent=True),
        out_dir=subpath(output.summary, parent=True),
        checkpoint_dir=result("bench/runs/ddp/{repeat}/checkpoints"),
        extra="--engine ddp",


rule bench_ddp_vs_zero3:
    input:
        ddp=expand(rules.train_ddp_baseline.output.metrics, repeat=BENCH_REPEATS),
        zero3_untuned=expand(
            rules.train_bench_run.output.metrics, bench_row="zero3-untuned", repeat=BENCH_REPEATS
        ),
        zero3=expand(rules.train_bench_run.output.metrics, bench_row="zero3", repeat=BENCH_REPEATS),
        zero0=expand(rules.train_bench_run.output.metrics, bench_row="zero0", repeat=BENCH_REPEATS),
        zero2_offload=expand(
            rules.train_bench_run.output.metrics, bench_row="zero2-offload", repeat=BENCH_REPEATS
        ),
    output:
        table=result("bench/ddp_vs_zero3.txt"),
        data=result("bench/ddp_vs_zero3.json"),
    log:
        result("logs/bench/bench_ddp_vs_zero3.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        warmup_steps=WARMUP_STEPS,
        steps=SETTINGS.training.optimizer_steps,
        profile_name=PROFILE_NAME,
    script:
        "../scripts/bench_ddp_vs_zero3.py"


rule bench_metrics_overhead:
    input:
        on=expand(rules.train_bench_run.output.summary, bench_row="zero3", repeat=BENCH_REPEATS),
        off=expand(rules.train_bench_run.output.summary, bench_row="zero3-no-metrics", repeat=BENCH_REPEATS),
    output:
        table=result("bench/metrics_overhead.txt"),
        data=result("bench/metrics_overhead.json"),
    log:
        result("logs/bench/bench_metrics_overhead.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        steps=SETTINGS.training.optimizer_steps,
        profile_name=PROFILE_NAME,
    script:
        "../scripts/bench_metrics_overhead.py"


# Two processes with one thread each, as the training ranks run; holds the host like a training run.
rule bench_gloo_latency:
    output:
        table=result("bench/gloo_latency.txt"),
    log:
        result("logs/bench/bench_gloo_latency.log"),
    conda:
        "../../envs/train.yaml"
    threads: 2
    resources:
        host_share=HOST_SHARE_POOL,
    params:
        iterations=RUN_CONFIG.bench_gloo_iterations,
    shell:
        "python -m zerogate.bench.gloo_latency --iterations {params.iterations} --out {output.table} > {log} 2>&1"
        " && cat {output.table} >&2"


# The planner's validation grid (config/planner_grid.yaml, zerogate.bench.grid_points and .planner_grid):
# every point a profile extending the grid's base, written by write_grid_profiles after the whole grid is
# checked; each point runs the pipeline's own rules up to compare_ledger under that profile (one Snakemake
# invocation per point, since a profile is fixed per invocation), its results under
# results/planner-grid-<point>/<machine>/. predict_peak_memory is always re-run, so the table judges the
# planner as it is now (the training is redone only when the point's run changed); the ledger table, run spec,
# DeepSpeed config and the train rule's benchmark are copied beside the grid's table.
rule write_grid_profiles:
    input:
        grid=planner_grid_file,
    output:
        profiles=expand(
            f"{PLANNER_GRID_DIR}/profiles/{{name}}", name=[f"{PROFILE_PREFIX}{p}.yaml" for p in GRID_POINTS]
        ),
    log:
        result("logs/bench/write_grid_profiles.log"),
    localrule: True
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/write_grid_profiles.py"


rule run_grid_point:
    input:
        profile=f"{PLANNER_GRID_DIR}/profiles/{PROFILE_PREFIX}{{point}}.yaml",
        planner=PLANNER_SOURCES,
    output:
        ledger=f"{PLANNER_GRID_DIR}/points/{{point}}/ledger_vs_measured.json",
        run_spec=f"{PLANNER_GRID_DIR}/points/{{point}}/run_spec.json",
        ds_config=f"{PLANNER_GRID_DIR}/points/{{point}}/ds_config.json",
        train_benchmark=f"{PLANNER_GRID_DIR}/points/{{point}}/train.tsv",
    log:
        result("logs/bench/planner_grid/{point}.log"),
    benchmark:
        result("benchmarks/bench/planner_grid/{point}.tsv")
    conda:
        "../../envs/train.yaml"
    threads: host_cores()
    resources:
        host_share=HOST_SHARE_POOL,
    params:
        results=lambda wildcards: grid_point_results(wildcards.point),
    shell:
        "snakemake --cores {threads} --config profile={input.profile} --forcerun predict_peak_memory -- compare_ledger"
        " > {log} 2>&1"
        " && cp {params.results}/ledger/ledger_vs_measured.json {output.ledger}"
        " && cp {params.results}/deepspeed/run_spec.json {output.run_spec}"
        " && cp {params.results}/deepspeed/ds_config.json {output.ds_config}"
        " && cp {params.results}/benchmarks/train.tsv {output.train_benchmark}"


rule bench_planner_grid:
    input:
        unpack(planner_grid_runs),
    output:
        table=result("bench/planner_grid.txt"),
        data=result("bench/planner_grid.json"),
        markdown=result("bench/planner_grid.md"),
    log:
        result("logs/bench/bench_planner_grid.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        points=GRID_POINTS,
    script:
        "../scripts/bench_planner_grid.py"


# ZeRO's peers against ZeRO-3 (make bench-peers): the variants' own runs (train_variant) of the rows of
# zerogate.bench.peers_vs_zero3, whatever the profile lists; not part of `bench`.
rule bench_peers_vs_zero3:
    input:
        metrics=expand(rules.train_variant.output.metrics, variant=PEER_BENCH_VARIANTS),
        summaries=expand(rules.train_variant.output.summary, variant=PEER_BENCH_VARIANTS),
    output:
        table=result("bench/peers_vs_zero3.txt"),
        data=result("bench/peers_vs_zero3.json"),
    log:
        result("logs/bench/bench_peers_vs_zero3.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        warmup_steps=WARMUP_STEPS,
        steps=VARIANT_STEPS,
        profile_name=PROFILE_NAME,
        intervals=INTERVALS,
    script:
        "../scripts/bench_peers_vs_zero3.py"


rule bench:
    input:
        rules.bench_ddp_vs_zero3.output.table,
        rules.bench_metrics_overhead.output.table,
        rules.bench_gloo_latency.output.table,
        rules.bench_planner_grid.output.table,
    localrule: True
