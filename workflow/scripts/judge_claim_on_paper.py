"""Entry point of the judge_claim_on_paper rule: the claim's statements judged on paper for its claimed box
(zerogate.analysis.claims.judge_on_paper), printed after the plan."""

import sys
from pathlib import Path

from zerogate.analysis.claims import on_paper_text
from zerogate.config.claims import read_claims
from zerogate.config.machines import load_description
from zerogate.contracts.plan import Plan
from zerogate.entry import logging_to

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    text = on_paper_text(
        snakemake.params.claim,
        read_claims(inputs.claims),
        Plan.read(inputs.claimed_plan),
        load_description(inputs.description),
    )
    log.info("\n%s", text)
    Path(snakemake.output.summary).write_text(text + "\n")
    print(text, file=sys.__stderr__)
