"""The micro-benchmarks of a rendered run, from its files (the measure_microbenchmarks rule's script and the
GPU check's tests/gpu/microbench_point.py call it): the rank's environment set from the run spec before
zerogate.predict.microbench, which imports torch and loads DeepSpeed's CPU Adam, is imported, and as many
processes timing at once as the run has ranks on the host (zerogate.predict.microbench_together); this
module imports neither torch nor DeepSpeed."""

from __future__ import annotations

import os
from pathlib import Path

from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.predict.microbench_together import measure_together, ranks_on_host


def measure_rendered(
    run_spec: Path | str, ds_config: Path | str, fingerprint: Path | str
) -> tuple[Microbench, str]:
    """zerogate.predict.microbench.measure on the run spec, DeepSpeed config and probe fingerprint files, with
    the rank's environment (DS_ACCELERATOR, thread counts: the run spec's), in this process and one forked
    companion per other rank of the host (zerogate.predict.microbench_together.ranks_on_host), pooled; with
    what DeepSpeed's op loading printed meanwhile (zerogate.runtime.probe.captured_output)."""
    spec, config = RunSpec.read(run_spec), DsConfig.read(ds_config)
    probed = Fingerprint.read(fingerprint)
    os.environ.update(spec.env)
    return measure_together(spec, config, probed.collectives, str(fingerprint), ranks_on_host(spec))
