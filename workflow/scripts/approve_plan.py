"""Entry point of the approve_plan rule: training may start only if the plan fits or the profile overrides."""
from zerogate.entry import fail, logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.planner import refusal

with logging_to(snakemake.log[0]) as log:
    plan = read_json(snakemake.input.plan)
    if plan["refused"]:
        message = refusal(plan)
        log.error("\n%s", message)
        fail(message)
    for deviation in plan["deviations"]:
        log.warning("deviation %s: %s", deviation["path"], deviation["reason"])
    write_json(snakemake.output.approved, {"fits": plan["fits"], "deviations": plan["deviations"]})
