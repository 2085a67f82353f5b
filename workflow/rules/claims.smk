# The claim measured on the machine that ran, and on paper for its claimed box, into claims/<name>/ (only
# when a claim is judged: config key `claim`). Depends only on the claim file and finished outputs of the run:
# editing a statement re-judges, never retrains.
if CLAIMS:

    rule judge_seed_claims:
        input:
            claims=CLAIM_FILE,
            claimed_plan=rules.plan_claimed_box.output.plan,
            description=CLAIMED_BOX.machine,
            plan=rules.replan_with_measured_compute.output.plan,
            ledger=rules.compare_ledger.output.table,
            gates=rules.check_gates.output.verdicts,
            fingerprint=rules.probe_hardware.output.fingerprint,
            communication=rules.tabulate_comms_volume.output.table,
        output:
            verdicts=claim_result("verdicts.json"),
        log:
            claim_result("logs/judge_seed_claims.log"),
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        params:
            machine=MACHINE,
            claim=CLAIM_NAME,
            # The claim's own accumulation, for the measured ZeRO-3 / DDP ratio at it.
            claim_accumulation=CLAIMED_SETTINGS.training.gradient_accumulation_steps,
        script:
            "../scripts/judge_seed_claims.py"
