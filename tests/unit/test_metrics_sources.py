"""The GPU-side metric sources with fakes: allocator peaks reset per window, NVML sampled in the
background, pinned host memory, FLOP/s and MFU; and resuming appends to the checkpoint's lines."""

import threading
from pathlib import Path

import pytest
import torch

from tests.unit.helpers import step_record
from zerogate.contracts.base import line_of, read_lines
from zerogate.contracts.records import StepRecord
from zerogate.hardware import peak_flops, product_parameters, training_flops_per_token
from zerogate.model.counts import count_parameters
from zerogate.model.hf_config import load_config
from zerogate.train.metrics import MeasurementSources, ModelFlops, StepMetrics
from zerogate.train.nvml_sampler import NvmlSampler
from zerogate.units import GIB

REPO = Path(__file__).resolve().parents[2]


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
    """The rank's metrics file, every line a StepRecord."""
    return read_lines(StepRecord, path)


def test_gpu_peaks_are_per_window_and_pinned_memory_is_recorded(tmp_path):
    probe = FakeProbe()
    recorder = StepMetrics(
        tmp_path / "rank1.jsonl", 1, torch.device("cpu"), sources=MeasurementSources(probe=probe)
    )
    assert probe.resets == 1  # a fresh window at the start
    for step in (1, 2):
        recorder.start_step()
        recorder.end_step(step, 2.0, 1.0, 1e-3, 10, 1)
    recorder.close()
    first, second = lines(tmp_path / "rank1.jsonl")
    assert probe.resets == 3  # reset after every window
    assert (first.max_allocated_gib, first.max_reserved_gib) == (2, 4)
    assert (second.max_allocated_gib, second.device_peak_gib) == (3, 5)
    assert first.device_peak_source == "torch.cuda.max_memory_reserved"
    assert first.pinned_host_gib == 0.5


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
    recorder = StepMetrics(
        tmp_path / "r.jsonl",
        0,
        torch.device("cpu"),
        sources=MeasurementSources(nvml=NvmlSampler(Readings([3 * GIB]), interval_s=3600)),
    )
    recorder.start_step()
    recorder.end_step(1, 2.0, 1.0, 1e-3, 10, 1)
    recorder.close()
    assert lines(tmp_path / "r.jsonl")[0].nvml_process_peak_gib == 3


def test_an_untied_input_embedding_is_a_lookup_not_a_product():
    """The FLOP count's parameters leave out an untied input embedding (vocab x hidden: a lookup) and keep a
    tied one (the output head multiplies by it). Pythia-70M's shipped shape: 37 % of its parameters are its
    input embedding."""
    assert product_parameters(1000, 10, 8, tied=False) == 920
    assert product_parameters(1000, 10, 8, tied=True) == 1000
    config = load_config(REPO / "config/models/pythia-70m.json")
    counts = count_parameters(config)
    products = product_parameters(counts.total, counts.vocab, counts.hidden, counts.tied_embeddings)
    assert counts.total == 70_426_624 and not counts.tied_embeddings
    assert counts.total - products == 50304 * 512 and 0.36 < 1 - products / counts.total < 0.37


def test_flops_and_mfu_only_where_the_peak_is_known(tmp_path):
    assert training_flops_per_token(1000, 2, 8, 16) == 6000 + 12 * 2 * 8 * 16
    assert training_flops_per_token(1000, 2, 8, 16, recompute=True) == 8000 + 16 * 2 * 8 * 16
    # zerogate.hardware's basis: fp16 inputs with fp16 accumulate on the 4090 (not the 165.2 of fp32
    # accumulate).
    assert peak_flops("NVIDIA GeForce RTX 4090", "fp16") == 330.3e12
    assert peak_flops(None, "fp32") is None and peak_flops("Some GPU", "fp16") is None
    recorder = StepMetrics(
        tmp_path / "r.jsonl", 0, torch.device("cpu"), flops=ModelFlops(per_token=1e6, peak_per_s=1e9)
    )
    recorder.start_step()
    record = recorder.end_step(1, 2.0, 1.0, 1e-3, 50, 2, processed_tokens=64)
    recorder.close()
    assert record.model_flops_per_s == pytest.approx(64e6 / record.step_time_s)
    assert record.mfu == pytest.approx(record.model_flops_per_s / 1e9)
    assert lines(tmp_path / "r.jsonl") == [record]  # what end_step returns is the line it wrote


def test_micro_step_times_and_resume_appends(tmp_path):
    path = tmp_path / "rank0.jsonl"
    path.write_text(line_of(step_record(step=1)) + "\n")  # the checkpoint's copy of the lines so far
    recorder = StepMetrics(path, 0, torch.device("cpu"), append=True)
    recorder.start_step()
    for _ in range(3):
        recorder.micro_step_done()
    record = recorder.end_step(2, 2.0, 1.0, 1e-3, 10, 3, extra={"update_applied": True})
    recorder.close()
    assert [line.step for line in lines(path)] == [1, 2]
    assert 0 <= record.micro_step_time_max_s <= record.step_time_s
    assert record.update_applied is True
