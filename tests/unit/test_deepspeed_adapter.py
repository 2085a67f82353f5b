"""zerogate.runtime.deepspeed_adapter against a REAL DeepSpeed ZeRO-3 engine (one process, gloo, CPU
accelerator, optimizer offloaded as in the default profile): the private internals the skip path relies
on must still exist and still behave. A DeepSpeed upgrade that moves one of them fails here."""

import pytest
import torch

from zerogate.runtime import deepspeed_adapter as adapter

ACCUMULATION = 2


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).pow(2).mean()


@pytest.fixture(scope="module")
def engine(one_rank_world):
    import deepspeed

    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": ACCUMULATION,
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu"},
            "stage3_param_persistence_threshold": 0,
        },
        "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
        # A rising LR that is never 0, so an update changes the weights and a held schedule shows.
        "scheduler": {
            "type": "WarmupLR",
            "params": {
                "warmup_min_lr": 0.05,
                "warmup_max_lr": 0.1,
                "warmup_num_steps": 10,
                "warmup_type": "linear",
            },
        },
    }
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = Tiny()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    yield engine


def weights(engine):
    """This rank's partitions (world size 1: all of each parameter)."""
    return [p.ds_tensor.detach().clone() for p in engine.module.parameters()]


def window(engine, apply, poison=1.0):
    """One accumulation window; the boundary step goes through the adapter."""
    for micro in range(ACCUMULATION):
        loss = engine(torch.randn(4, 8)) * poison
        engine.backward(loss)
        if micro < ACCUMULATION - 1:
            engine.step()
    adapter.boundary_step(engine, apply=apply)


def test_a_dropped_update_leaves_weights_and_schedule_and_the_next_window_applies(engine):
    start = weights(engine)
    window(engine, apply=True)  # a first applied window, so the optimizer state exists
    assert adapter.update_applied(engine)
    assert not all(torch.equal(a, b) for a, b in zip(start, weights(engine))), (
        "an applied update left the weights"
    )
    before, lr, skipped, global_steps = (
        weights(engine),
        engine.get_lr()[0],
        adapter.skipped_steps(engine),
        engine.global_steps,
    )

    window(engine, apply=False, poison=float("nan"))  # what the stabiliser does with a NaN window
    assert all(torch.equal(a, b) for a, b in zip(before, weights(engine))), (
        "a dropped update changed the weights"
    )
    assert not adapter.update_applied(engine)
    assert adapter.skipped_steps(engine) == skipped + 1 and engine.global_steps == global_steps + 1
    assert engine.get_lr()[0] == lr  # the LR schedule holds on a skipped step
    assert "step" not in vars(engine.optimizer)  # the optimizer's own step() is back

    window(engine, apply=True)  # the micro-step counter is not one short: this window's boundary applies
    after = weights(engine)
    assert adapter.update_applied(engine) and adapter.skipped_steps(engine) == skipped + 1
    assert not all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(torch.isfinite(t).all() for t in after), "the NaN gradients of the dropped window leaked"
    norm = adapter.global_grad_norm(engine)
    assert isinstance(norm, float) and norm > 0 and norm == norm


def test_fp32_has_no_loss_scale(engine):
    assert adapter.fp16(engine) is False and adapter.loss_scale(engine) is None


def test_a_destroyed_zero3_engine_is_freed_once_deepspeeds_globals_forget_it(engine):
    import gc
    import weakref

    import deepspeed

    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu"},
            "stage3_param_persistence_threshold": 0,
        },
        "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
    }

    def build_step_destroy():
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = Tiny()
        other, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        for _ in range(3):  # past the first steps, so the fetch trace is complete and its cache used
            other.backward(other(torch.randn(4, 8)))
            other.step()
        other.destroy()
        return weakref.ref(model)

    model = build_step_destroy()
    gc.collect()
    assert model() is not None, "DeepSpeed no longer keeps destroyed engines: forget_zero3_engines can go"
    adapter.forget_zero3_engines()
    gc.collect()
    assert model() is None, "something else still holds the destroyed engine's model"


# Every parameter released after its module unless the fetch trace keeps it (no persistent parameters).
ZERO3_TRAINING = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
}


@pytest.mark.parametrize("retrace", [True, False], ids=["retraced", "deepspeeds-own"])
def test_an_evaluation_before_training_leaves_the_backward_its_gathered_parameters_only_once_retraced(
    one_rank_world, retrace
):
    """A forward-only pass first (the run's evaluation before step 1), then training: under ZeRO-3 a
    parameter the backward uses again must stay gathered after the forward. DeepSpeed 0.19.8's release cache
    keeps the forward-only trace's answer ("release") unless zerogate.runtime.engines' train() retraces."""
    from zerogate.runtime.deepspeed_adapter import forget_zero3_engines
    from zerogate.runtime.engines import DeepSpeedEngine

    torch.manual_seed(0)
    wrapped = DeepSpeedEngine(Tiny(), ZERO3_TRAINING)
    engine = wrapped.engine
    try:
        wrapped.eval()
        with torch.no_grad():
            wrapped(x=torch.randn(4, 8))
        if retrace:
            wrapped.train()
        else:
            engine.train()  # DeepSpeed's own train(): the trace and its release cache left as they are
        states = []
        for _ in range(4):  # the first backward re-records the trace; the later forwards follow it
            loss = engine(torch.randn(4, 8))
            states.append(engine.module.a.weight.ds_status.name)
            engine.backward(loss)
            engine.step()
        if retrace:
            assert states[-1] == "AVAILABLE", f"the first layer's weight released after the forward: {states}"
        else:
            assert states[-1] == "NOT_AVAILABLE", (
                f"DeepSpeed now keeps the weight gathered for the backward after an evaluation ({states}): "
                "retrace_zero3 may no longer be needed"
            )
    finally:
        engine.destroy()
        forget_zero3_engines()


def test_an_evaluation_after_training_steps_leaves_the_complete_trace_in_place(one_rank_world):
    """An evaluation between training steps follows the recorded trace's forward: the step after it is an
    ordinary one (the trace kept), so the live-tensor step sampled after the last evaluation is too."""
    from zerogate.runtime.deepspeed_adapter import forget_zero3_engines, zero3_trace
    from zerogate.runtime.engines import DeepSpeedEngine

    wrapped = DeepSpeedEngine(Tiny(), ZERO3_TRAINING)
    engine = wrapped.engine
    try:
        wrapped.train()
        for _ in range(3):
            engine.backward(engine(torch.randn(4, 8)))
            engine.step()
        recorded = zero3_trace(engine)
        assert recorded is not None, "three training steps left no complete trace"
        wrapped.eval()
        with torch.no_grad():
            wrapped(x=torch.randn(4, 8))
        wrapped.train()
        assert zero3_trace(engine) is recorded
        loss = engine(torch.randn(4, 8))
        assert engine.module.a.weight.ds_status.name == "AVAILABLE"
        engine.backward(loss)
        engine.step()
    finally:
        engine.destroy()
        forget_zero3_engines()
