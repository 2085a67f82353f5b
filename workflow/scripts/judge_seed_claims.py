"""Entry point of the judge_seed_claims rule (logic: zerogate.analysis.claims)."""

from zerogate.analysis.claim_evidence import Evidence
from zerogate.analysis.claims import judge
from zerogate.config.claims import read_claims
from zerogate.config.machines import load_description
from zerogate.contracts.comms import CommsVolume
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.plan import Plan
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    evidence = Evidence(
        claimed_plan=Plan.read(inputs.claimed_plan),
        run_plan=Plan.read(inputs.plan),
        ledger=LedgerTable.read(inputs.ledger),
        gates=GateVerdicts.read(inputs.gates),
        claimed_machine=load_description(inputs.description),
        fingerprint=Fingerprint.read(inputs.fingerprint),
        machine=snakemake.params.machine,
        communication=CommsVolume.read(inputs.communication),
        claim_accumulation=snakemake.params.claim_accumulation,
    )
    verdicts = judge(read_claims(inputs.claims), evidence, snakemake.params.claim)
    for claim in verdicts.claims:
        log.info("%s: on paper %s; measured here %s", claim.id, claim.on_paper.text, claim.measured_here.text)
    verdicts.write(snakemake.output.verdicts)
