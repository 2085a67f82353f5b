"""Entry point of the judge_claim_on_paper rule: the claim's statements judged on paper for its claimed box
(zerogate.analysis.claims.judge_on_paper) and where the time goes on that box (zerogate.predict.step_time),
printed after the plan."""

import sys
from pathlib import Path

from zerogate.analysis.claims import on_paper_text
from zerogate.config.claims import read_claims
from zerogate.config.machines import load_description
from zerogate.contracts.plan import Plan
from zerogate.entry import logging_to
from zerogate.predict.step_time_text import time_lines

with logging_to(snakemake.log[0]) as log:
    inputs = snakemake.input
    claimed = Plan.read(inputs.claimed_plan)
    text = on_paper_text(
        snakemake.params.claim, read_claims(inputs.claims), claimed, load_description(inputs.description)
    )
    # Where the time goes on the claimed box, as plan.txt shows it for this run.
    claimed_time = [f"the claimed box, {claimed.machine} ({claimed.scheme}, {claimed.ranks} ranks):"]
    text += "\n" + "\n".join([*claimed_time, *time_lines(claimed.step_time, claimed.floor)])
    log.info("\n%s", text)
    Path(snakemake.output.summary).write_text(text + "\n")
    print(text, file=sys.__stderr__)
