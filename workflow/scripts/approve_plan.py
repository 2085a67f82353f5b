"""Entry point of the approve_plan rule: training may start only if the pre-flight check passes and the plan
fits (or the profile overrides the planner). Writes nothing when it refuses."""
from zerogate.entry import fail, logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.planner import refusal
from zerogate.plan.preflight import preflight_refusal

with logging_to(snakemake.log[0]) as log:
    plan = read_json(snakemake.input.plan)
    preflight = read_json(snakemake.input.preflight)
    reasons = []
    if plan["refused"]:
        reasons.append(refusal(plan))
    if not preflight["ok"]:
        reasons.append(preflight_refusal(preflight, snakemake.params.profile_name))
    if reasons:
        message = "\n".join(reasons)
        log.error("\n%s", message)
        fail(message)
    for deviation in plan["deviations"]:
        log.warning("deviation %s: %s", deviation["path"], deviation["reason"])
    write_json(snakemake.output.approved, {"fits": plan["fits"], "deviations": plan["deviations"],
                                           "preflight": preflight})
