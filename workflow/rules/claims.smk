# Depends only on claims.yaml and finished outputs of the run: editing a claim re-judges, never retrains.
rule judge_seed_claims:
    input:
        claims=CLAIMS_FILE,
        claimed_plan=rules.plan_claimed_box.output.plan,
        description=CLAIMED_BOX.machine,
        plan=rules.replan_with_measured_compute.output.plan,
        ledger=rules.compare_ledger.output.table,
        gates=rules.check_gates.output.verdicts,
        fingerprint=rules.probe_hardware.output.fingerprint,
        communication=rules.tabulate_comms_volume.output.table,
    output:
        verdicts=result("claims/verdicts.json"),
    log:
        result("logs/judge_seed_claims.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        machine=MACHINE,
        # The claim's own accumulation, for the measured ZeRO-3 / DDP ratio at it.
        claim_accumulation=CLAIMED_SETTINGS.training.gradient_accumulation_steps,
    script:
        "../scripts/judge_seed_claims.py"
