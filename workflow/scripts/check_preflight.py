"""Entry point of the check_preflight rule (logic: zerogate.plan.preflight)."""
from zerogate.entry import fail, logging_to
from zerogate.io import read_json, write_json
from zerogate.plan.preflight import verdict

with logging_to(snakemake.log[0]) as log:
    result = verdict(snakemake.params.needs, read_json(snakemake.input.fingerprint))
    log.info("pre-flight: %s", result)
if not result["ok"]:
    basis = (snakemake.params.needs or {}).get("basis", "")
    fail(f"profile {snakemake.params.profile_name} refused by the pre-flight check: "
         f"{'; '.join(result['shortfalls'])}" + (f" ({basis})" if basis else ""))
write_json(snakemake.output.preflight, result)
