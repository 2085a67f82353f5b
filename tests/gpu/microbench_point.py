"""One point's micro-benchmarks for the GPU check (tests/gpu/check_runs.py), in a process of its own with the
rank's environment: zerogate.predict.microbench.measure, the measure_microbenchmarks rule's function, on the
point's rendered run spec and DeepSpeed config. Nothing of the point's model is built or stepped, so the step
time planned from these rates is a prediction of the run the check launches after it.

    python -m tests.gpu.microbench_point RUN_SPEC DS_CONFIG FINGERPRINT OUT
"""

from __future__ import annotations

import os
import sys

from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.run import DsConfig, RunSpec


def main(argv: list[str]) -> int:
    run_spec_path, ds_config_path, fingerprint_path, out = argv
    run_spec, ds_config = RunSpec.read(run_spec_path), DsConfig.read(ds_config_path)
    os.environ.update(run_spec.env)
    # Imported once the rank's environment is set: the module imports torch and loads DeepSpeed's CPU Adam.
    from zerogate.predict.microbench import measure

    fingerprint = Fingerprint.read(fingerprint_path)
    measure(run_spec, ds_config, fingerprint.collectives, fingerprint_path).write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
