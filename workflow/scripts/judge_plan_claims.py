"""Entry point of the judge_plan_claims rule: the run's fit and, where a claim is judged, the profile's gates
on paper (zerogate.analysis.on_paper), and the plan's text. The claim's own statements on paper are
judge_claim_on_paper's."""

import sys
from pathlib import Path

from zerogate.analysis.on_paper import plan_claims
from zerogate.config.judging import GateSettings
from zerogate.config.training import RunTraining
from zerogate.contracts.base import typed
from zerogate.contracts.plan import Plan
from zerogate.entry import logging_to
from zerogate.predict.plan_text import summary
from zerogate.render.overlay import overlay, overlay_text

with logging_to(snakemake.log[0]) as log:
    inputs, params = snakemake.input, snakemake.params
    plan = Plan.read(inputs.plan)
    claims = plan_claims(plan, typed(tuple[GateSettings, ...], params.gates))
    lines = [(c.gate, c.verdict.text) for c in claims.claims]
    text = summary(plan, lines)
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
