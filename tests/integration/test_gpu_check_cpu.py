"""The GPU check's CPU mode (tests/gpu/gpu_check.py --cpu, docs/gpu-kit.md): the same grid, launches and
result files as on a lent GPU, on cpu-tiny's tiny model over DeepSpeed's CPU accelerator, so that the check
does not rot between lent machines. Every point is rendered and planned; one is launched (two optimizer
steps), ZeRO-2 with the optimizer offloaded, the grid's only ZeRO-2 point: a launch costs 10-20 s of CPU
(mostly imports), the suite's time is short, and the other points' ZeRO schemes train on the CPU in the
communication-volume run (test_comms_volume.py). `make gpu-check-cpu` launches all four."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.gpu.check_points import POINTS, STEPS
from tests.gpu.check_results import CPU_ABSENT, LEVELS
from tests.integration import prefetch
from tests.integration.pipeline import REPO, env

pytestmark = pytest.mark.integration
# Each point's ZeRO variant as the plan names its scheme (zerogate.predict.setup.Setup.scheme): the rendered
# config trains what the point asks for.
SCHEMES = {
    "zero3": "zero3",
    "zero3-offload": "zero3_offload_optimizer",
    "zero3-offload-all": "zero3_offload_all",
    "zero2-offload": "zero2_offload_optimizer",
}
LAUNCHED = ("zero2-offload",)
FILES = {
    "check.json",
    "steps.jsonl",
    "levels.json",
    "micro_batch.json",
    "plans.json",
    "tables.md",
    "runs.log",
}


@prefetch.prefetched
def prepare_cpu_check(tmp_path_factory, smoke_run):
    """The check's CPU mode into a folder of its own (it needs nothing of the smoke run)."""
    out = tmp_path_factory.mktemp("gpu-check-cpu")

    def build():
        started = time.monotonic()
        # A budget no CI machine reaches: here every point must run (the budget's skipping is the GPU's
        # concern).
        done = subprocess.run(
            [sys.executable, "tests/gpu/gpu_check.py", "--cpu", "--out", str(out), "--budget-s", "1200"]
            + ["--launch", *LAUNCHED],
            cwd=REPO,
            env=env(),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        return out, done, time.monotonic() - started

    return build


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory):
    out, done, seconds = prefetch.result(__name__, prepare_cpu_check, tmp_path_factory, None)
    print(f"GPU check, CPU mode: {seconds:.1f} s")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return out


def test_every_point_trained_and_the_files_are_the_gpu_checks(cpu_check):
    assert {p.name for p in cpu_check.iterdir()} == FILES  # at most 8 files come back from a device call
    check = json.loads((cpu_check / "check.json").read_text())
    assert check["mode"] == "cpu" and check["problems"] == [] and check["skipped"] == []
    assert check["runs"] == {
        point: {"outcome": "trained", "seconds": check["runs"][point]["seconds"], "steps": STEPS["cpu"]}
        if point in LAUNCHED
        else {"outcome": "not launched: left out by --launch"}
        for point in POINTS
    }
    assert set(check["ops"]["seconds"]) == {"ShareMemCommBuilder", "CPUAdamBuilder", "FusedAdamBuilder"}
    assert check["fingerprint"]["accelerator"]["kind"] == "cpu"
    assert check["process_memory_outside_allocator"] == {"not_run": "CPU mode: no CUDA context"}


def test_each_step_has_its_readings_or_the_reason_it_has_none(cpu_check):
    rows = [json.loads(line) for line in (cpu_check / "steps.jsonl").read_text().splitlines()]
    assert [(r["point"], r["step"]) for r in rows] == [
        (p, s) for p in LAUNCHED for s in range(1, STEPS["cpu"] + 1)
    ]
    for row in rows:
        assert row["step_time(s)"] > 0 and row["loss"] > 0 and row["resident_peak(bytes)"] > 2**20
        for _, _, reading in LEVELS:
            assert row[reading] is None and row["absent"][reading] == CPU_ABSENT
        assert row["loss_scale"] is None and "fp32" in row["absent"]["loss_scale"]


def test_each_run_is_set_beside_its_own_plan_level_by_level(cpu_check):
    plans = json.loads((cpu_check / "plans.json").read_text())
    assert {point: plan["scheme"] for point, plan in plans.items()} == SCHEMES
    levels = json.loads((cpu_check / "levels.json").read_text())
    assert [(r["point"], r["level"]) for r in levels] == [(p, level[0]) for p in POINTS for level in LEVELS]
    for row in levels:
        zerogate = plans[row["point"]]["ledger"]["schemes"][row["scheme"]]["zerogate"]
        assert row["scheme"] == SCHEMES[row["point"]]
        assert row["predicted(bytes)"] > 0
        assert row["predicted(bytes)"] in {
            zerogate["device_tensor_peak_per_rank(bytes)"],
            zerogate["device_allocator_peak_per_rank(bytes)"],
            zerogate["device_per_rank(bytes)"],
        }
        assert row["measured(bytes)"] is None
        assert row["absent"] == (
            CPU_ABSENT if row["point"] in LAUNCHED else "not launched: left out by --launch"
        )
    # Offloading the optimizer takes its states off the device: the plan says so, level by level.
    tensor = {r["point"]: r["predicted(bytes)"] for r in levels if r["level"] == "tensor"}
    assert tensor["zero3-offload-all"] < tensor["zero3-offload"] < tensor["zero3"]


def test_the_search_is_planned_for_each_card_and_not_run_without_a_device(cpu_check):
    rows = json.loads((cpu_check / "micro_batch.json").read_text())
    assert [r["point"] for r in rows] == [*POINTS, *POINTS]
    assert rows[0]["cap_bytes"] < rows[-1]["cap_bytes"]  # the claim's small card first
    for row in rows:
        assert row["plan"] >= 1 and row["largest"] is None and row["probes"] == []
        assert row["status"].startswith("not run: CPU mode")
    table = (cpu_check / "tables.md").read_text()
    assert table.count("| zero3-offload-all |") == 3 + 2  # three levels, two cards
