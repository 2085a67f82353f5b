"""The GPU-side metric sources with fakes: allocator peaks reset per window, NVML sampled in the
background, pinned host memory, FLOP/s and MFU; and resuming appends to the checkpoint's lines."""

import json
import threading

import pytest
import torch

from zerogate.train.metrics import GIB, StepMetrics, peak_flops, train_flops_per_token
from zerogate.train.nvml_sampler import NvmlSampler


class FakeProbe:
    def __init__(self):
        self.allocated, self.reserved, self.resets = [2 * GIB, 3 * GIB], [4 * GIB, 5 * GIB], 0

    def max_allocated(self):
        return self.allocated[min(self.resets - 1, 1)]

    def max_reserved(self):
        return self.reserved[min(self.resets - 1, 1)]

    def pinned_host_bytes(self):
        return GIB // 2

    def reset_peaks(self):
        self.resets += 1


class Readings:
    """A query returning scripted values, then repeating the last."""

    def __init__(self, values):
        self.values, self.calls = list(values), 0

    def __call__(self):
        value = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return value


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_gpu_peaks_are_per_window_and_pinned_memory_is_recorded(tmp_path):
    probe = FakeProbe()
    recorder = StepMetrics(tmp_path / "rank1.jsonl", 1, torch.device("cpu"), probe=probe)
    assert probe.resets == 1  # a fresh window at the start
    for step in (1, 2):
        recorder.start_step()
        recorder.end_step(step, 2.0, 1.0, 1e-3, 10, 1)
    recorder.close()
    first, second = lines(tmp_path / "rank1.jsonl")
    assert probe.resets == 3  # reset after every window
    assert (first["memory/max_allocated(GiB)"], first["memory/max_reserved(GiB)"]) == (2, 4)
    assert (second["memory/max_allocated(GiB)"], second["memory/device_peak(GiB)"]) == (3, 5)
    assert first["memory/device_peak_source"] == "torch.cuda.max_memory_reserved"
    assert first["memory/pinned_host(GiB)"] == 0.5


def test_nvml_sampler_keeps_the_window_peak_and_starts_afresh():
    sampler = NvmlSampler(Readings([1, 7, 3]), interval_s=3600)
    sampler.sample(), sampler.sample()
    assert sampler.take_peak() == 7  # the take itself samples once more (3): the peak stays 7
    assert sampler.take_peak() == 3
    assert NvmlSampler(Readings([None])).take_peak() is None


def test_nvml_sampler_thread_samples_in_the_background():
    seen = threading.Event()

    def query():
        seen.set()
        return 5

    sampler = NvmlSampler(query, interval_s=0.001).start()
    assert seen.wait(timeout=5)
    sampler.stop()
    assert sampler.take_peak() == 5


def test_nvml_peak_lands_in_the_step_line(tmp_path):
    recorder = StepMetrics(tmp_path / "r.jsonl", 0, torch.device("cpu"),
                           nvml=NvmlSampler(Readings([3 * GIB]), interval_s=3600))
    recorder.start_step()
    recorder.end_step(1, 2.0, 1.0, 1e-3, 10, 1)
    recorder.close()
    assert lines(tmp_path / "r.jsonl")[0]["memory/nvml_process_peak(GiB)"] == 3


def test_flops_and_mfu_only_where_the_peak_is_known(tmp_path):
    assert train_flops_per_token(1000, 2, 8, 16) == 6000 + 12 * 2 * 8 * 16
    assert peak_flops("NVIDIA GeForce RTX 4090", "fp16") == 330.3e12  # zerogate.hardware's basis (was 165.2: finding 9)
    assert peak_flops(None, "fp32") is None and peak_flops("Some GPU", "fp16") is None
    recorder = StepMetrics(tmp_path / "r.jsonl", 0, torch.device("cpu"), flops_per_token=1e6, peak_flops_per_s=1e9)
    recorder.start_step()
    record = recorder.end_step(1, 2.0, 1.0, 1e-3, 50, 2, processed_tokens=64)
    recorder.close()
    assert record["model_flops_per_s(FLOP/s)"] == pytest.approx(64e6 / record["step_time(s)"])
    assert record["mfu(ratio)"] == pytest.approx(record["model_flops_per_s(FLOP/s)"] / 1e9)


def test_micro_step_times_and_resume_appends(tmp_path):
    path = tmp_path / "rank0.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n")  # the checkpoint's copy of the lines so far
    recorder = StepMetrics(path, 0, torch.device("cpu"), append=True)
    recorder.start_step()
    for _ in range(3):
        recorder.micro_step_done()
    record = recorder.end_step(2, 2.0, 1.0, 1e-3, 10, 3, extra={"update_applied": True})
    recorder.close()
    assert [line["step"] for line in lines(path)] == [1, 2]
    assert 0 <= record["micro_step_time_max(s)"] <= record["step_time(s)"]
    assert record["update_applied"] is True
