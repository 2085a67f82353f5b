"""Entry point of the enforce_gates rule: with `strict: true`, any FAIL fails the invocation."""
from pathlib import Path

from zerogate.analysis.gates import failed_gates
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.entry import fail, logging_to

with logging_to(snakemake.log[0]) as log:
    failed = failed_gates(GateVerdicts.read(snakemake.input.verdicts))
    if failed:
        log.error("strict: %d gate(s) FAIL: %s", len(failed), "; ".join(failed))
        fail(f"strict: {len(failed)} gate(s) FAIL ({', '.join(failed)}); "
             f"see {snakemake.input.verdicts} and {snakemake.input.report}")
    Path(snakemake.output.passed).write_text("no gate failed\n")
