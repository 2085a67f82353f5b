"""The GPU check's judging logic on hand-made results (the check itself needs a GPU: tests/gpu/)."""

from tests.gpu.check_gpu_1x import check_results
from tests.unit.helpers import step_record
from zerogate.contracts.base import write_lines
from zerogate.contracts.records import EvalRecord

GIB = 1024**3


def make_results(tmp_path, steps=3, nvml=True, allocated=1.0, reserved=1.5, phases=("before", "after")):
    """A one-GPU run's records as the training loop writes them (StepRecord and EvalRecord lines)."""
    (tmp_path / "report").mkdir()
    records = [
        step_record(
            step=step,
            device="cuda:0",
            max_allocated_gib=allocated,
            max_reserved_gib=reserved,
            device_peak_gib=reserved,
            device_peak_source="torch.cuda.max_memory_reserved",
            nvml_process_peak_gib=reserved + 0.4 if nvml else None,
        )
        for step in range(1, steps + 1)
    ]
    write_lines(tmp_path / "train/metrics/rank0.jsonl", records)
    write_lines(
        tmp_path / "train/eval.jsonl",
        [
            EvalRecord(
                step=0 if p == "before" else steps,
                phase=p,
                validation_loss=1.0,
                validation_tokens=100,
                validation_rows=10,
                eval_time_s=0.1,
            )
            for p in phases
        ],
    )
    (tmp_path / "report/zerogate-v1-x.html").write_text("<p>1 CUDA device(s): NVIDIA H200</p>")
    return tmp_path


def test_a_good_run_passes(tmp_path):
    assert check_results(make_results(tmp_path), 3, 80 * GIB) == []


def test_missing_nvml_and_disordered_peaks_are_reported(tmp_path):
    problems = check_results(make_results(tmp_path, nvml=False, allocated=2.0, reserved=1.0), 3, 80 * GIB)
    assert sum("no NVML sample" in p for p in problems) == 3
    assert sum("max_allocated 2.000 <= max_reserved 1.000" in p for p in problems) == 3


def test_peak_beyond_the_card_and_missing_final_eval_are_reported(tmp_path):
    problems = check_results(make_results(tmp_path, reserved=90.0, phases=("before",)), 3, 80 * GIB)
    assert any("device 80.0 GiB" in p for p in problems)
    assert any("expected before ... after" in p for p in problems)
