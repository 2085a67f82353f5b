"""One point's micro-benchmarks for the GPU check (tests/gpu/check_runs.py), in a process of its own with the
rank's environment: zerogate.predict.microbench_files.measure_rendered, the measure_microbenchmarks rule's
function, on the point's rendered run spec and DeepSpeed config. Nothing of the point's model is built or
stepped, so the step time planned from these rates is a prediction of the run the check launches after it.

    python -m tests.gpu.microbench_point RUN_SPEC DS_CONFIG FINGERPRINT OUT
"""

from __future__ import annotations

import sys

from zerogate.predict.microbench_files import measure_rendered


def main(argv: list[str]) -> int:
    run_spec, ds_config, fingerprint, out = argv
    bench, _ = measure_rendered(run_spec, ds_config, fingerprint)
    bench.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
