rule plot_figures:
    input:
        run_summary=rules.summarise_run.output.summary,
        steps=rules.parse_logs.output.steps,
        events=rules.parse_logs.output.events,
        verdicts=rules.check_gates.output.verdicts,
    output:
        loss=report(
            result("report/figures/loss.png"),
            caption="../report/loss.rst",
            category="Training",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
        step_time=report(
            result("report/figures/step_time.png"),
            caption="../report/step_time.rst",
            category="Training",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
        memory=report(
            result("report/figures/memory.png"),
            caption="../report/memory.rst",
            category="Training",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
        loss_scale=report(
            result("report/figures/loss_scale.png"),
            caption="../report/loss_scale.rst",
            category="Training",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
        ranks=report(
            result("report/figures/ranks.png"),
            caption="../report/ranks.rst",
            category="Training",
            subcategory=f"{PROFILE_NAME} on {MACHINE}",
        ),
    log:
        result("logs/plot_figures.log"),
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/plot_figures.py"


rule record_provenance:
    input:
        fingerprint=rules.probe_hardware.output.fingerprint,
        manifest=rules.prepare_dataset.output.manifest,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        summary=rules.train.output.summary,
    output:
        provenance=result("provenance.json"),
    log:
        result("logs/record_provenance.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        profile_name=PROFILE_NAME,
        profile=PROFILE,
        config_hash=CONFIG_HASH,
        run_id=RUN_ID,
    script:
        "../scripts/record_provenance.py"


# The report's name carries the pipeline version, the run id (profile, machine, config hash) and the
# UTC date the DAG was built (RUN_LABEL in common.smk), so reports of other configs and other days sit
# beside each other.
rule write_report:
    input:
        # the claim's verdicts (claims) and its claimed box's plan (claimed_plan): none with claim=none
        unpack(
            claim_outputs(
                lambda: {
                    "claims": rules.judge_seed_claims.output.verdicts,
                    "claimed_plan": rules.plan_claimed_box.output.plan,
                }
            )
        ),
        run_summary=rules.summarise_run.output.summary,
        verdicts=rules.check_gates.output.verdicts,
        steps=rules.parse_logs.output.steps,
        events=rules.parse_logs.output.events,
        run_meta=rules.parse_logs.output.run_meta,
        provenance=rules.record_provenance.output.provenance,
        deviations=rules.render_deepspeed_config.output.deviations,
        ledger=rules.compare_ledger.output.table,
        plan=rules.replan_with_measured_compute.output.plan,
        communication=rules.tabulate_comms_volume.output.table,
        evaluation=rules.train.output.evaluation,
        loss=rules.plot_figures.output.loss,
        step_time=rules.plot_figures.output.step_time,
        memory=rules.plot_figures.output.memory,
        loss_scale=rules.plot_figures.output.loss_scale,
        ranks=rules.plot_figures.output.ranks,
        variants=variants_inputs("table"),
        variants_figure=variants_inputs("figure"),
    output:
        html=report(
            result(f"report/zerogate-{RUN_LABEL}.html"),
            caption="../report/html.rst",
            category="Report",
        ),
    log:
        result(f"logs/write_report-{RUN_LABEL}.log"),
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/write_report.py"


rule register_run:
    input:
        run_summary=rules.summarise_run.output.summary,
        verdicts=rules.check_gates.output.verdicts,
        steps=rules.parse_logs.output.steps,
        events=rules.parse_logs.output.events,
        run_meta=rules.parse_logs.output.run_meta,
        provenance=rules.record_provenance.output.provenance,
        deviations=rules.render_deepspeed_config.output.deviations,
        report=rules.write_report.output.html,
        loss=rules.plot_figures.output.loss,
        step_time=rules.plot_figures.output.step_time,
        memory=rules.plot_figures.output.memory,
        loss_scale=rules.plot_figures.output.loss_scale,
        repeat_steps=repeat_outputs("steps"),  # listed in the registry, for compare's curves
    output:
        registry=result("registry.json"),
    log:
        result("logs/register_run.log"),
    conda:
        "../../envs/analysis.yaml"
    params:
        machine=MACHINE,
    script:
        "../scripts/register_run.py"


# With `strict: true` this runs last and fails the invocation on any FAIL. It is a separate rule so that
# the verdicts and the report, outputs of jobs that succeeded, stay on disk for the user to read.
rule enforce_gates:
    input:
        verdicts=rules.check_gates.output.verdicts,
        report=rules.write_report.output.html,
    output:
        passed=result(f"gates/strict-{RUN_LABEL}.passed"),
    log:
        result(f"logs/enforce_gates-{RUN_LABEL}.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/enforce_gates.py"
