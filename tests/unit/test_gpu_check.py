"""The GPU check's judging logic on hand-made results (the check itself needs a GPU: tests/gpu/)."""

import json

from tests.gpu.check_gpu_1x import check_results

GIB = 1024**3


def make_results(tmp_path, steps=3, nvml=True, allocated=1.0, reserved=1.5, phases=("before", "after")):
    (tmp_path / "train/metrics").mkdir(parents=True)
    (tmp_path / "report").mkdir()
    rows = []
    for step in range(1, steps + 1):
        row = {"step": step, "memory/max_allocated(GiB)": allocated, "memory/max_reserved(GiB)": reserved,
               "memory/device_peak_source": "torch.cuda.max_memory_reserved"}
        if nvml:
            row["memory/nvml_used(GiB)"] = reserved + 0.4
        rows.append(row)
    (tmp_path / "train/metrics/rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "train/eval.jsonl").write_text("".join(json.dumps({"phase": p, "validation/loss": 1.0}) + "\n" for p in phases))
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
