"""The device each torch-native engine (DDP, FSDP2) trains a rank on: the one deepspeed.initialize would pick
for the DeepSpeed engine, so that a baseline never trains on the host while ZeRO trains on the GPU."""

import deepspeed.accelerator
import torch

from zerogate.runtime.engines import rank_device


class FakeAccelerator:
    """The three calls rank_device makes of DeepSpeed's accelerator, as a CUDA box answers them."""

    def __init__(self, name: str) -> None:
        self.name, self.current = name, 0

    def device_name(self) -> str:
        return self.name

    def set_device(self, index: int) -> None:
        self.current = index

    def current_device(self) -> int:
        return self.current


def test_the_cpu_accelerator_trains_on_the_host(monkeypatch):
    monkeypatch.setattr(deepspeed.accelerator, "get_accelerator", lambda: FakeAccelerator("cpu"))
    assert rank_device() == torch.device("cpu")


def test_a_gpu_rank_trains_on_the_device_of_its_local_rank(monkeypatch):
    fake = FakeAccelerator("cuda")
    monkeypatch.setattr(deepspeed.accelerator, "get_accelerator", lambda: fake)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_device() == torch.device("cuda", 1) and fake.current == 1
    monkeypatch.delenv("LOCAL_RANK")
    assert rank_device() == torch.device("cuda", 0)
