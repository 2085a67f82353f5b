"""Entry point of the judge_plan_claims rule: the profile's claims judged on paper, and the plan's text."""
import sys
from pathlib import Path

from zerogate.entry import logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.overlay import overlay, overlay_text
from zerogate.plan.planner import judge_claims, summary

with logging_to(snakemake.log[0]) as log:
    plan = read_json(snakemake.input.plan)
    claims = judge_claims(plan, snakemake.params.gates)
    text = summary(plan, claims)
    log.info("\n%s", text)
    write_json(snakemake.output.claims, claims)
    Path(snakemake.output.summary).write_text(text + "\n")
    # Does not fit one node: the planner's multi-node answer as a profile overlay one can run.
    params = snakemake.params
    extra = overlay_text(overlay(plan, params.profile_name, params.profile, params.machine), params.profile_name, plan)
    Path(snakemake.output.overlay).write_text(extra)
    print(text, file=sys.__stderr__)
    if not extra.startswith("# No multi-node overlay"):
        print(f"\n{snakemake.output.overlay}:\n{extra}", file=sys.__stderr__)
