"""plan/compute.py: the model's own forward + backward, timed (the floor's measured compute term)."""

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
