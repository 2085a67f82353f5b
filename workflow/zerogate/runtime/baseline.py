"""The runtime's own resident set: the CPU peak prediction's baseline term (rule measure_runtime_baseline).

A throw-away interpreter (``python -m zerogate.runtime.baseline OPTIONS``) imports the training ranks'
module (torch, deepspeed, transformers and the rest of what a rank loads), resolves DeepSpeed's
accelerator and initialises its distributed backend as a one-process world on a free port (gloo; on the
CPU accelerator this loads the shm comm op); then, when a rendered DeepSpeed config is given, builds an
engine from it around a one-layer model (8 x 8 weights) and takes one optimizer step through the one
training loop (zerogate.runtime.loop): the engine, the optimizer's op (CPU Adam) and autograd loaded,
nothing that scales with the run's model; and, when the run's training split is given, reads it as a
rank reads it (zerogate.data.dataset.load_split: pyarrow's libraries and memory pool, 70 MiB here, and
the rows). It prints the process's peak resident set (VmHWM) and its parts as one JSON line and removes
the shm workspace it created.

:func:`measure_runtime_baseline` runs it a few times in fresh interpreters and takes the median.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from zerogate.runtime.launch import remove_own_shm_buffers, start_one_rank_world
from zerogate.runtime.process_exit import exit_without_teardown

RESULT_PREFIX = "BASELINE "
STATUS_KEYS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")


def process_status() -> dict[str, int]:
    """This process's resident-set figures from /proc/self/status, in bytes."""
    found = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in STATUS_KEYS:
                found[key] = int(value.split()[0]) * 1024
    return found


def measure_in_this_process(options: dict[str, Any]) -> dict[str, Any]:
    """The measurement itself (in a fresh interpreter: what was loaded before counts). Each stage imports
    what it needs only once the stage before is measured: the training module's imports come first."""
    importlib.import_module(options["module"])
    # Here, after the measured module (which loads DeepSpeed itself), not at the top: the rule's process
    # imports this module too, and loads neither torch nor DeepSpeed.
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    port = start_one_rank_world(options["backend"])
    stages = {"imports_and_backend": process_status()}
    if options.get("split"):
        # Here: what reading the split loads (pyarrow) is part of this stage's figure.
        from zerogate.data.dataset import load_split

        load_split(options["split"])
        stages["training_split_read"] = process_status()
    if options.get("ds_config"):
        # Here: what building an engine loads (transformers' model, the optimizer's op) is this stage's.
        from zerogate.runtime.loop import one_step_on_a_tiny_model

        one_step_on_a_tiny_model(options["ds_config"])
        stages["engine_and_one_step"] = process_status()
    remove_own_shm_buffers(port)
    return {"accelerator": accelerator._name, **stages[list(stages)[-1]], "stages": stages}


def parse_baseline(output: str) -> dict[str, Any]:
    """The JSON line the measuring process prints (its other output is the libraries' chatter)."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    raise RuntimeError("runtime baseline: the measuring process printed no result:\n" + output[-2000:])


def measure_runtime_baseline(
    module: str = "zerogate.train.loop",
    backend: str = "gloo",
    env: dict[str, str] | None = None,
    repeats: int = 3,
    ds_config: dict[str, Any] | None = None,
    split: str | None = None,
) -> dict[str, Any]:
    """The resident set of a process that has loaded what a training rank loads, and (with the run's
    rendered ``ds_config``) built a DeepSpeed engine and taken an optimizer step on a model of 72
    parameters: the runtime's share of a rank's peak, nothing that scales with the model. With ``split``
    (the run's train.parquet) the process also reads it as a rank does.

    Measured ``repeats`` times in fresh interpreters (``env`` on top of this one's: DS_ACCELERATOR and the
    thread counts of the run); the median is the baseline, the spread is its noise."""
    args = [json.dumps({"module": module, "backend": backend, "ds_config": ds_config, "split": split})]
    # The interpreters run side by side: a resident-set peak does not depend on what else runs (unlike a
    # time), and most of each one's wall time is importing torch and DeepSpeed.
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "zerogate.runtime.baseline", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        for _ in range(repeats)
    ]
    runs = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=600)
            if process.returncode != 0:
                raise RuntimeError(
                    f"runtime baseline: the measuring process failed ({process.returncode}):\n"
                    + output[-2000:]
                )
            runs.append(parse_baseline(output))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    peaks = [int(r["VmHWM"]) for r in runs]
    return {
        "peak_rss(bytes)": int(statistics.median(peaks)),
        "peak_rss_range(bytes)": [min(peaks), max(peaks)],
        "runs": runs,
        "module": module,
        "backend": backend,
        "how": (
            f"{repeats} fresh interpreters side by side: import {module}, DeepSpeed's accelerator, "
            f"deepspeed.init_distributed({backend!r}) as a one-process world"
            + (f", {split} read" if split else "")
            + (
                ", an engine from the run's config on an 8 x 8 linear layer and one optimizer step"
                if ds_config
                else ""
            )
            + "; VmHWM, median"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    options = json.loads((argv if argv is not None else sys.argv[1:])[0])
    print(RESULT_PREFIX + json.dumps(measure_in_this_process(options)), flush=True)
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())
