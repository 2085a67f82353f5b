"""Entry point of the enforce_gates rule: with `strict: true`, any FAIL or INCONCLUSIVE gate fails the
invocation (an INCONCLUSIVE gate is counted apart: the run could not confirm its claim, so it does not
pass)."""

from pathlib import Path

from zerogate.analysis.gates import failed_gates, inconclusive_gates
from zerogate.contracts.verdicts import GateVerdicts
from zerogate.entry import fail, logging_to

with logging_to(snakemake.log[0]) as log:
    verdicts = GateVerdicts.read(snakemake.input.verdicts)
    failed, inconclusive = failed_gates(verdicts), inconclusive_gates(verdicts)
    if failed or inconclusive:
        parts = ([f"{len(failed)} gate(s) FAIL ({', '.join(failed)})"] if failed else []) + (
            [f"{len(inconclusive)} gate(s) INCONCLUSIVE ({', '.join(inconclusive)})"] if inconclusive else []
        )
        log.error("strict: %s", "; ".join(parts))
        fail(f"strict: {'; '.join(parts)}; see {snakemake.input.verdicts} and {snakemake.input.report}")
    Path(snakemake.output.passed).write_text("no gate failed or was inconclusive\n")
