"""plan/compute.py: the model's own forward + backward, timed (the floor's measured compute term)."""

import json
import subprocess
import sys
import textwrap

from zerogate.model.build import model_config
from zerogate.plan.compute import measure_forward_backward
from zerogate.plan.ledger import count_parameters

SHAPE = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}


def test_times_the_run_shaped_model_and_keeps_the_fastest_pass():
    config = model_config(SHAPE, vocab_size=50, seq_len=8)
    measured = measure_forward_backward(config, micro_batch=2, seq_len=8, dtype="fp32", threads=1, timed=3)
    assert len(measured["samples(s)"]) == 3 and measured["forward_backward(s)"] == min(measured["samples(s)"]) > 0
    # The same model the planner counts, on the run's micro-batch and thread count.
    assert measured["parameters"] == count_parameters(config).total
    assert (measured["micro_batch"], measured["seq_len"], measured["threads"], measured["dtype"]) == (2, 8, 1, "fp32")
    assert measured["through_deepspeed"] is False


# Through the run's ZeRO-3 engine in a one-rank world: in a child process (it initialises torch.distributed
# and DeepSpeed's CPU accelerator, which must not leak into this test session). The child records the world's
# rendezvous port, which names its shm buffers: other runs on the machine (the suite's smoke run trains
# beside the unit tests) have buffers of their own.
CHILD = textwrap.dedent("""
    import json, os, sys
    os.environ["DS_ACCELERATOR"] = "cpu"
    import zerogate.runtime.launch as launch
    ports, start = [], launch.start_one_rank_world
    launch.start_one_rank_world = lambda *args, **kwargs: ports.append(start(*args, **kwargs)) or ports[-1]
    from zerogate.model.build import model_config
    from zerogate.plan.compute import measure_forward_backward
    config = model_config(json.loads(sys.argv[1]), vocab_size=50, seq_len=8)
    ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                "stage3_param_persistence_threshold": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    measured = measure_forward_backward(config, 2, 8, "fp32", 1, ds_config=ds, timed=3)
    print("RESULT " + json.dumps(measured))
    print("PORTS " + json.dumps(ports))
""")


def test_through_the_runs_zero3_engine_in_a_one_rank_world_leaving_no_shm_buffers():
    from zerogate.runtime.launch import shm_buffers

    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SHAPE)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    measured = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert measured["through_deepspeed"] is True and "ZeRO stage 3" in measured["how"]
    assert len(measured["samples(s)"]) == 3 and measured["forward_backward(s)"] == min(measured["samples(s)"])
    # ZeRO-3 partitions every parameter: the engine's count is its ds_numel, the whole model on one rank.
    assert measured["parameters"] == count_parameters(model_config(SHAPE, vocab_size=50, seq_len=8)).total
    (ports,) = [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("PORTS ")]
    assert len(ports) == 1 and not shm_buffers(ports[0])
