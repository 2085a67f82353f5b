"""Entry point of the approve_plan rule: training may start only if the pre-flight check passes and the plan's
point need fits (or the profile overrides the planner). Writes nothing when it refuses. A plan whose verdict
is "may not fit" (a capacity inside its need's interval, the point need within it) is approved with a
warning in the log."""

from zerogate.contracts.machine import Preflight
from zerogate.contracts.plan import Approval, Plan
from zerogate.entry import fail, logging_to
from zerogate.predict.plan_text import may_not_fit_warning, refusal
from zerogate.predict.preflight import preflight_refusal

with logging_to(snakemake.log[0]) as log:
    plan = Plan.read(snakemake.input.plan)
    preflight = Preflight.read(snakemake.input.preflight)
    reasons = []
    if plan.refused:
        reasons.append(refusal(plan))
    if not preflight.ok:
        reasons.append(preflight_refusal(preflight, snakemake.params.profile_name))
    if reasons:
        message = "\n".join(reasons)
        log.error("\n%s", message)
        fail(message)
    warning = may_not_fit_warning(plan)
    if warning:
        log.warning("\n%s", warning)
    for deviation in plan.deviations:
        log.warning("deviation %s: %s", deviation.path, deviation.reason)
    Approval(fits=plan.fits, deviations=plan.deviations, preflight=preflight).write(snakemake.output.approved)
