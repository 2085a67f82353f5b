rule plot_figures:
    input:
        steps="results/{profile}/{machine}/parsed/steps.parquet",
        events="results/{profile}/{machine}/parsed/events.parquet",
        verdicts="results/{profile}/{machine}/gates/verdicts.json",
    output:
        loss=report(
            "results/{profile}/{machine}/report/figures/loss.png",
            caption="../report/loss.rst",
            category="Training",
            subcategory="{profile} on {machine}",
        ),
        step_time=report(
            "results/{profile}/{machine}/report/figures/step_time.png",
            caption="../report/step_time.rst",
            category="Training",
            subcategory="{profile} on {machine}",
        ),
        memory=report(
            "results/{profile}/{machine}/report/figures/memory.png",
            caption="../report/memory.rst",
            category="Training",
            subcategory="{profile} on {machine}",
        ),
        loss_scale=report(
            "results/{profile}/{machine}/report/figures/loss_scale.png",
            caption="../report/loss_scale.rst",
            category="Training",
            subcategory="{profile} on {machine}",
        ),
    params:
        warmup_steps=PROFILE["training"]["warmup_steps_excluded"],
        stabiliser=STABILISER_SETTINGS,
    log:
        "results/{profile}/{machine}/logs/plot_figures.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/plot_figures.py"


rule record_provenance:
    input:
        fingerprint="results/{profile}/{machine}/probe/hardware.json",
        manifest="results/{profile}/{machine}/dataset/manifest.json",
        ds_config="results/{profile}/{machine}/deepspeed/ds_config.json",
        summary="results/{profile}/{machine}/train/summary.json",
    output:
        provenance="results/{profile}/{machine}/provenance.json",
    params:
        profile_name=PROFILE_NAME,
        profile=PROFILE,
        config_hash=CONFIG_HASH,
        run_id=RUN_ID,
        repo=str(REPO),
    log:
        "results/{profile}/{machine}/logs/record_provenance.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/record_provenance.py"


# The report's name carries the pipeline version, the run id (profile, machine, config hash) and the
# UTC date the DAG was built (REPORT_DATE in common.smk), so reports of other configs and other days sit
# beside each other.
rule write_report:
    input:
        verdicts="results/{profile}/{machine}/gates/verdicts.json",
        steps="results/{profile}/{machine}/parsed/steps.parquet",
        events="results/{profile}/{machine}/parsed/events.parquet",
        run_meta="results/{profile}/{machine}/parsed/run.json",
        provenance="results/{profile}/{machine}/provenance.json",
        deviations="results/{profile}/{machine}/deepspeed/deviations.json",
        ledger="results/{profile}/{machine}/ledger/ledger_vs_measured.json",
        evaluation="results/{profile}/{machine}/train/eval.jsonl",
        loss="results/{profile}/{machine}/report/figures/loss.png",
        step_time="results/{profile}/{machine}/report/figures/step_time.png",
        memory="results/{profile}/{machine}/report/figures/memory.png",
        loss_scale="results/{profile}/{machine}/report/figures/loss_scale.png",
    output:
        html=report(
            "results/{profile}/{machine}/report/zerogate-v{version}-{run_id}-{date}.html",
            caption="../report/html.rst",
            category="Report",
        ),
    params:
        warmup_steps=PROFILE["training"]["warmup_steps_excluded"],
        stabiliser=STABILISER_SETTINGS,
    log:
        "results/{profile}/{machine}/logs/write_report-v{version}-{run_id}-{date}.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/write_report.py"


rule register_run:
    input:
        verdicts="results/{profile}/{machine}/gates/verdicts.json",
        steps="results/{profile}/{machine}/parsed/steps.parquet",
        events="results/{profile}/{machine}/parsed/events.parquet",
        run_meta="results/{profile}/{machine}/parsed/run.json",
        provenance="results/{profile}/{machine}/provenance.json",
        deviations="results/{profile}/{machine}/deepspeed/deviations.json",
        report=report_file,
        loss="results/{profile}/{machine}/report/figures/loss.png",
        step_time="results/{profile}/{machine}/report/figures/step_time.png",
        memory="results/{profile}/{machine}/report/figures/memory.png",
        loss_scale="results/{profile}/{machine}/report/figures/loss_scale.png",
    output:
        registry="results/{profile}/{machine}/registry.json",
    params:
        warmup_steps=PROFILE["training"]["warmup_steps_excluded"],
        stabiliser=STABILISER_SETTINGS,
    log:
        "results/{profile}/{machine}/logs/register_run.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/register_run.py"
