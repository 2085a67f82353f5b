"""Entry point of the judge_plan_claims rule: the profile's claims and the seed's judged on paper
(zerogate.analysis.on_paper, zerogate.analysis.claims), and the plan's text."""

import sys
from pathlib import Path

from zerogate.analysis.claims import judge_on_paper
from zerogate.analysis.on_paper import plan_claims
from zerogate.config.claims import read_claims
from zerogate.config.judging import GateSettings
from zerogate.config.machines import load_description
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.plan import Plan
from zerogate.entry import logging_to
from zerogate.predict.plan_text import summary
from zerogate.predict.step_time_text import time_lines
from zerogate.render.overlay import overlay, overlay_text

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    plan = Plan.read(inputs.plan)
    claims = plan_claims(plan, typed(tuple[GateSettings, ...], params.gates))
    claimed = Plan.read(inputs.claimed_plan)
    seed = judge_on_paper(read_claims(inputs.claims), claimed, load_description(inputs.description))
    lines = [(c.gate, c.verdict.text) for c in claims.claims]
    lines += [(f"seed claim {claim_id} (for the claimed box)", verdict.text) for claim_id, verdict in seed]
    # Where the time goes on the claimed box too, beside this run's (zerogate.predict.step_time).
    claimed_time = [f"the claimed box, {claimed.machine} ({claimed.scheme}, {claimed.ranks} ranks):"]
    claimed_time += time_lines(claimed.step_time, claimed.floor)
    text = summary(plan, lines) + "\n" + "\n".join(claimed_time)
    log.info("\n%s", text)
    claims.write(snakemake.output.claims)
    Path(snakemake.output.summary).write_text(text + "\n")
    # Does not fit one node: the planner's multi-node answer as a profile overlay one can run.
    extra = overlay_text(
        overlay(
            plan, params.profile_name, typed(RunTraining, params.training), params.overrides, params.machine
        ),
        params.profile_name,
        plan,
    )
    Path(snakemake.output.overlay).write_text(extra)
    print(text, file=sys.__stderr__)
    if not extra.startswith("# No multi-node overlay"):
        print(f"\n{snakemake.output.overlay}:\n{extra}", file=sys.__stderr__)
