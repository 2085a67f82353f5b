"""Dropping one update: the optimizer step is replaced for one call, the gradients are discarded, the
engine is told "overflow" (so it counts a skipped step and holds the LR schedule), and all is restored."""

import torch

from zerogate.runtime.deepspeed_adapter import update_dropped


class Stage3Like:
    """The parts of DeepSpeedZeroOptimizer_Stage3 that update_dropped touches."""

    def __init__(self):
        self.overflow, self.loss_scale, self.cleaned, self.stepped = False, 1.0, [], 0

    def _overflow_clean_up(self, prev_scale):
        self.cleaned.append(prev_scale)

    def step(self):
        self.stepped += 1


def take_model_step(optimizer):
    """engine._take_model_step's use of the optimizer: step, then read overflow."""
    optimizer.step()
    return getattr(optimizer, "overflow", False)


def test_zero3_update_is_dropped_once_then_restored():
    optimizer = Stage3Like()
    with update_dropped(optimizer):
        assert take_model_step(optimizer) is True
    assert optimizer.cleaned == [1.0] and optimizer.stepped == 0
    assert take_model_step(optimizer) is False and optimizer.stepped == 1


def test_plain_torch_optimizer_leaves_weights_untouched_and_gradients_dropped():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    (weight * float("nan")).sum().backward()
    with update_dropped(optimizer):
        assert take_model_step(optimizer) is True
    assert torch.equal(weight.detach(), torch.ones(3)) and weight.grad is None
    assert not hasattr(optimizer, "overflow")  # a plain optimizer must not keep reporting overflows
    (weight * 2).sum().backward()
    optimizer.step()
    assert not torch.equal(weight.detach(), torch.ones(3))
