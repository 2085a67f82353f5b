"""Entry point of the judge_seed_claims rule (logic: zerogate.analysis.claims)."""
import yaml

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.analysis.claims import Evidence, judge

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    claims = yaml.safe_load(open(inputs.claims))
    evidence = Evidence(claimed_plan=read_json(inputs.claimed_plan), run_plan=read_json(inputs.plan),
                        ledger=read_json(inputs.ledger), gates=read_json(inputs.gates),
                        claimed_machine=yaml.safe_load(open(inputs.description)),
                        fingerprint=read_json(inputs.fingerprint), machine=snakemake.params.machine,
                        communication=read_json(inputs.communication),
                        claim_accumulation=snakemake.params.claim_accumulation)
    verdicts = judge(claims, evidence)
    for claim in verdicts["claims"]:
        log.info("%s: on paper %s; measured here %s", claim["id"], claim["on_paper"]["text"], claim["measured_here"]["text"])
    write_json(snakemake.output.verdicts, verdicts)
