# The profile's stated needs (its preflight section) against the probed machine: a verdict, ok or not.
rule check_preflight:
    input:
        fingerprint=rules.probe_hardware.output.fingerprint,
    output:
        preflight=result("preflight/preflight.json"),
    log:
        result("logs/check_preflight.log"),
    conda:
        "../../envs/train.yaml"
    params:
        needs=PROFILE.get("preflight"),
    script:
        "../scripts/check_preflight.py"


# The planner: ledger + throughput floor against this machine (probed) or a described one
# (--config machine_description=config/machines/<name>.yaml). plan.json is written either way (it is the
# on-paper verdict); approve_plan fails, writing nothing, when the run does not fit and the profile does
# not override, or when the pre-flight check (check_preflight) finds the machine short of the profile's
# stated needs. Everything that costs time (the model, the dataset, every training run) depends on its
# approved.json, so a refused run starts none of it: the order comes from those input edges alone.
#
# The planner reads render_deepspeed_config's rendering (the one training uses). That rule takes the
# described machine as well as the probed one, so the described case needs no second rendering either.
rule plan_run:
    input:
        unpack(machine_input),
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
    output:
        plan=result("plan/plan.json"),
        # Each change the planner suggests, as a profile extending this one (its one plan command in plan.json).
        suggestions=directory(result("plan/suggestions")),
    log:
        result("logs/plan_run.log"),
    conda:
        "../../envs/train.yaml"
    params:
        # Not the gates: editing a gate must not re-plan, because training depends on the plan.
        plan=plain(SETTINGS.plan),
        profile_name=PROFILE_NAME,
        profile=PROFILE_ARG,
        training=plain(SETTINGS.training.run),
        overrides=SETTINGS.deepspeed.overrides,
        machine=MACHINE,
    script:
        "../scripts/plan_run.py"


# The one gate before any costly work: the planner's fit and the profile's pre-flight needs.
rule approve_plan:
    input:
        plan=rules.plan_run.output.plan,
        preflight=rules.check_preflight.output.preflight,
    output:
        approved=result("plan/approved.json"),
    log:
        result("logs/approve_plan.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        profile_name=PROFILE_NAME,
    script:
        "../scripts/approve_plan.py"


# The model's own forward + backward through the run's DeepSpeed engine on one rank, timed alone on this
# machine (CPU accelerator; zerogate.predict.compute): the floor's measured compute term. It builds the model,
# so only for an approved plan (a refused run builds nothing); a time, so it holds the whole host share.
rule measure_model_compute:
    input:
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        approved=rules.approve_plan.output.approved,
    output:
        compute=result("plan/model_compute.json"),
    log:
        result("logs/measure_model_compute.log"),
    conda:
        "../../envs/train.yaml"
    resources:
        host_share=HOST_SHARE_POOL,
    script:
        "../scripts/measure_model_compute.py"


# This machine's rates for the run's shapes, by micro-benchmarks that build and step no model
# (zerogate.predict.microbench): the linear layers' matrix products, memory copies, the optimizer update over
# a rank's partition, and the probe's collectives carried over. Only for an approved plan (the measurements
# follow the one gate); a time, so it holds the whole host share, with a rank's threads (the run spec's).
rule measure_microbenchmarks:
    input:
        fingerprint=rules.probe_hardware.output.fingerprint,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        approved=rules.approve_plan.output.approved,
    output:
        microbench=result("plan/microbench.json"),
    log:
        result("logs/measure_microbenchmarks.log"),
    conda:
        "../../envs/train.yaml"
    resources:
        host_share=HOST_SHARE_POOL,
    script:
        "../scripts/measure_microbenchmarks.py"


# plan_run's plan with its floor made again with the measured compute term and its step time predicted again
# with this machine's micro-benchmarked rates (plan.json, the one approve_plan judged, is the plan on paper):
# the two parts of a plan the measurements change, so nothing is traced again. What the judging and the
# report read.
rule replan_with_measured_compute:
    input:
        unpack(machine_input),
        plan=rules.plan_run.output.plan,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        model_compute=rules.measure_model_compute.output.compute,
        microbench=rules.measure_microbenchmarks.output.microbench,
    output:
        plan=result("plan/plan_measured.json"),
    log:
        result("logs/replan_with_measured_compute.log"),
    conda:
        "../../envs/train.yaml"
    params:
        machine=MACHINE,
    script:
        "../scripts/replan_with_measured_compute.py"


# plan_run's plan with its step time predicted with this machine's micro-benchmarked rates alone (the floor as
# on paper): nothing of the run's model is built or stepped, so its step time is a prediction that can be
# written down before the run it predicts (the same script as replan_with_measured_compute, without the
# model's measured compute).
rule predict_step_time:
    input:
        unpack(machine_input),
        plan=rules.plan_run.output.plan,
        ds_config=rules.render_deepspeed_config.output.ds_config,
        run_spec=rules.render_deepspeed_config.output.run_spec,
        microbench=rules.measure_microbenchmarks.output.microbench,
        # No rule trains from this file, so a changed planner predicts again (plan_run must not: training
        # depends on its plan).
        planner=PLANNER_SOURCES,
    output:
        plan=result("plan/plan_predicted.json"),
    log:
        result("logs/predict_step_time.log"),
    conda:
        "../../envs/train.yaml"
    params:
        machine=MACHINE,
    script:
        "../scripts/replan_with_measured_compute.py"


# The claimed box's plan, computed in-process through the planner's functions (render, count on the meta
# device, plan): one small job, no second invocation, no file from another run read behind the DAG's back.
# Its inputs are the claimed profile (params) and the box's description and template (files), not the
# claim's statements: editing a statement re-judges without re-planning. Only when a claim is judged
# (config key `claim`; none: neither rule is in the DAG), under the claim's own directory (claims/<name>/).
if CLAIMS:

    rule plan_claimed_box:
        input:
            description=CLAIMED_BOX.machine,
            template=CLAIMED_SETTINGS.deepspeed.template,
        output:
            plan=claim_result("claimed_box_plan.json"),
            # Each change the planner finds for the claimed box, as a profile extending the claimed one.
            suggestions=directory(claim_result("claimed_box_suggestions")),
        log:
            claim_result("logs/plan_claimed_box.log"),
        conda:
            "../../envs/train.yaml"
        params:
            model=plain(CLAIMED_SETTINGS.model),
            training=plain(CLAIMED_SETTINGS.training.run),
            overrides=CLAIMED_SETTINGS.deepspeed.overrides,
            seq_len=CLAIMED_SETTINGS.dataset.seq_len,
            vocab_size=CLAIMED_SETTINGS.vocab_size,
            plan=plain(CLAIMED_SETTINGS.plan),
            profile_name=CLAIMED_BOX.profile,
        script:
            "../scripts/plan_claimed_box.py"

    # The claim's statements judged on paper for the claimed box (zerogate.analysis.claims.judge_on_paper),
    # printed by the plan target after the plan.
    rule judge_claim_on_paper:
        input:
            claims=CLAIM_FILE,
            claimed_plan=rules.plan_claimed_box.output.plan,
            description=CLAIMED_BOX.machine,
        output:
            summary=claim_result("on_paper.txt"),
        log:
            claim_result("logs/judge_claim_on_paper.log"),
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        params:
            claim=CLAIM_NAME,
        script:
            "../scripts/judge_claim_on_paper.py"


# plan.txt: this run's plan and its fit, and, when a claim is judged (config key `claim`), the profile's gates
# judged on paper against it, in the words the report uses (zerogate.contracts.verdicts).
rule judge_plan_claims:
    input:
        plan=rules.plan_run.output.plan,
    output:
        claims=result("plan/claims.json"),
        summary=result("plan/plan.txt"),
        overlay=result("plan/multinode-overlay.yaml"),
    log:
        result("logs/judge_plan_claims.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        # The gates state a claim's thresholds: judged on paper only where a claim is named.
        gates=plain(SETTINGS.gates) if CLAIMS else [],
        profile_name=PROFILE_NAME,
        training=plain(SETTINGS.training.run),
        overrides=SETTINGS.deepspeed.overrides,
        machine=MACHINE,
    script:
        "../scripts/judge_plan_claims.py"


rule plan:
    input:
        plan_targets(),
    localrule: True
