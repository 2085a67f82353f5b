"""The micro-benchmarks of a rendered run, from its files (the measure_microbenchmarks rule's script and the
GPU check's tests/gpu/microbench_point.py call it): the rank's environment set from the run spec before
zerogate.predict.microbench, which imports torch and loads DeepSpeed's CPU Adam, is imported; this module
imports neither."""

from __future__ import annotations

import os
from pathlib import Path

from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.run import DsConfig, RunSpec


def measure_rendered(
    run_spec: Path | str, ds_config: Path | str, fingerprint: Path | str
) -> tuple[Microbench, str]:
    """zerogate.predict.microbench.measure on the run spec, DeepSpeed config and probe fingerprint files, in
    this process with the rank's environment (DS_ACCELERATOR, thread counts: the run spec's); with what
    DeepSpeed's op loading printed meanwhile (zerogate.runtime.probe.captured_output)."""
    spec, config = RunSpec.read(run_spec), DsConfig.read(ds_config)
    probed = Fingerprint.read(fingerprint)
    os.environ.update(spec.env)
    # Imported once the environment is set: torch and DeepSpeed's ops read it when they load.
    from zerogate.predict.microbench import measure
    from zerogate.runtime.probe import captured_output

    with captured_output() as output:
        bench = measure(spec, config, probed.collectives, str(fingerprint))
        return bench, output()
