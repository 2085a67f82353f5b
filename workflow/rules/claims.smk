# The seed's own statements (config/claims.yaml) judged on paper for the claimed box and measured on the
# machine that ran (zerogate.analysis.claims): claims/verdicts.json, the top of the report.
import yaml

CLAIMS_FILE = "config/claims.yaml"
CLAIMS = yaml.safe_load((REPO / CLAIMS_FILE).read_text())
validated(CLAIMS, "claims.schema.yaml")
CLAIMED_BOX = CLAIMS["claimed_box"]
if not (REPO / CLAIMED_BOX["machine"]).is_file():
    fail(InputError(CLAIMS_FILE, "claimed_box.machine", f"no such file: {CLAIMED_BOX['machine']}"))
CLAIMED_PROFILE = load_profile(CLAIMED_BOX["profile"])


# The claimed box's plan, computed in-process through the planner's functions (render, count on the meta
# device, plan): one small job, no second invocation, no file from another run read behind the DAG's back.
# Its inputs are the claimed profile (params) and the box's description and template (files), not
# claims.yaml's statements: editing a statement re-judges without re-planning.
rule plan_claimed_box:
    input:
        description=CLAIMED_BOX["machine"],
        template=CLAIMED_PROFILE["deepspeed"]["template"],
    output:
        plan=result("claims/claimed_box_plan.json"),
    params:
        profile={**{name: CLAIMED_PROFILE[name] for name in ("model", "dataset", "deepspeed") if name in CLAIMED_PROFILE},
                 "training": run_training_section(CLAIMED_PROFILE["training"]), "plan": CLAIMED_PROFILE.get("plan")},
        profile_name=CLAIMED_BOX["profile"],
    log:
        result("logs/plan_claimed_box.log"),
    conda:
        "../../envs/train.yaml"
    script:
        "../scripts/plan_claimed_box.py"


# Depends only on claims.yaml and finished outputs of the run: editing a claim re-judges, never retrains.
rule judge_seed_claims:
    input:
        claims=CLAIMS_FILE,
        claimed_plan=rules.plan_claimed_box.output.plan,
        description=CLAIMED_BOX["machine"],
        plan=rules.replan_with_measured_compute.output.plan,
        ledger=rules.compare_ledger.output.table,
        gates=rules.check_gates.output.verdicts,
        fingerprint=rules.probe_hardware.output.fingerprint,
        communication=rules.tabulate_comms_volume.output.table,
    output:
        verdicts=result("claims/verdicts.json"),
    params:
        machine=MACHINE,
        # The claim's own accumulation, for the measured ZeRO-3 / DDP ratio at it (issue 11).
        claim_accumulation=CLAIMED_PROFILE["training"]["gradient_accumulation_steps"],
    log:
        result("logs/judge_seed_claims.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/judge_seed_claims.py"
