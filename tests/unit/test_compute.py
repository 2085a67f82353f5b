"""predict/compute.py: the model's own forward + backward, timed through the run's DeepSpeed engine (the
floor's measured compute term)."""

import json
import subprocess
import sys
import textwrap

from tests.unit.helpers import settings
from tests.unit.test_ledger import rendered
from zerogate.config.model_data import ModelSettings
from zerogate.contracts.plan import ModelComputeMeasurement
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters

SHAPE = ModelSettings(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


def _small_run():
    """cpu-tiny's run with a 16-wide one-layer model on 8-token rows, micro-batch 2 x accumulation 2,
    rendered for the test machine (ZeRO-3, both offloads, 2 ranks sharing its 2 cores: one thread each)."""
    tiny = settings("cpu-tiny")
    training = tiny.training.model_copy(update={"micro_batch_per_rank": 2, "gradient_accumulation_steps": 2})
    small = tiny.model_copy(
        update={
            "model": SHAPE,
            "training": training,
            "dataset": tiny.dataset.model_copy(update={"seq_len": 8, "vocab_size": 50}),
        }
    )
    return rendered(small)


# Through the run's ZeRO-3 engine in a one-rank world: in a child process (it initialises torch.distributed
# and DeepSpeed's CPU accelerator, which must not leak into this test session), which reads the rendered
# files as the measure_model_compute rule does. The child records the world's rendezvous port, which names
# its shm buffers: other runs on the machine (the suite's smoke run trains beside the unit tests) have
# buffers of their own.
CHILD = textwrap.dedent("""
    import json, os, sys
    from zerogate.contracts.run import DsConfig, RunSpec
    run_spec, ds_config = RunSpec.read(sys.argv[1]), DsConfig.read(sys.argv[2])
    os.environ.update(run_spec.env)
    import zerogate.runtime.launch as launch
    ports, start = [], launch.start_one_rank_world
    launch.start_one_rank_world = lambda *args, **kwargs: ports.append(start(*args, **kwargs)) or ports[-1]
    from zerogate.predict.compute import measure_forward_backward
    measured = measure_forward_backward(run_spec, ds_config, timed=3)
    print("RESULT " + json.dumps(measured))
    print("PORTS " + json.dumps(ports))
""")


def test_times_the_runs_model_through_its_zero3_engine_keeping_the_fastest_pass_and_no_shm_buffers(tmp_path):
    from zerogate.runtime.launch import shm_buffers

    ds, run_spec = _small_run()
    assert ds.stage == 3 and run_spec.threads_per_rank == 1
    (tmp_path / "ds_config.json").write_text(json.dumps(ds.raw))
    run_spec.write(tmp_path / "run_spec.json")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "run_spec.json"), str(tmp_path / "ds_config.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    measured = ModelComputeMeasurement.of(
        json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:]),
        "the child",
    )
    assert measured.through_deepspeed is True and "ZeRO stage 3" in measured.how
    assert len(measured.samples_s) == 3 and measured.forward_backward_s == min(measured.samples_s) > 0
    # The run's micro-batch, row length, precision and a rank's thread count.
    assert (measured.micro_batch, measured.seq_len, measured.threads, measured.dtype) == (2, 8, 1, "fp32")
    # ZeRO-3 partitions every parameter: the engine's count is its ds_numel, the whole model the planner
    # counts.
    assert measured.parameters == count_parameters(planned_model_config(SHAPE, 50, 8)).total
    (ports,) = [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("PORTS ")]
    assert len(ports) == 1 and not shm_buffers(ports[0])
