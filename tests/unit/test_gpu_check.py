"""The GPU checks' judging logic on hand-made results and the micro-batch search on a fake card (the checks
themselves need a GPU: tests/gpu/; the runs' CPU mode is tests/integration/test_gpu_check_cpu.py)."""

import json
import subprocess
import time
from types import SimpleNamespace

import pytest

import tests.gpu.check_launch as check_launch
import tests.gpu.check_runs as check_runs
import tests.gpu.check_search as check_search
from tests.conftest import gpu_fingerprint
from tests.gpu import check_files
from tests.gpu.capped_loop import cap_device
from tests.gpu.check_files import MicroBatchRow
from tests.gpu.check_gpu_1x import check_results
from tests.gpu.check_launch import Budget, Launch, outcome_of, process_memory
from tests.gpu.check_points import (
    CLAIMED_BOX,
    POINTS,
    REPO,
    STEPS,
    Point,
    capped_machine,
    held_out_points,
    plan_point,
    prepare_datasets,
    render_point,
    write_grid,
)
from tests.gpu.check_results import LEVELS, step_time_row
from tests.gpu.check_runs import plan_runs, train_points
from tests.gpu.check_search import search_points
from tests.gpu.micro_batch_search import Search, resumed, search_largest
from tests.gpu.replan import replan
from tests.unit.helpers import step_record
from zerogate.config.machines import from_fingerprint, load_description
from zerogate.contracts.base import ContractError, write_lines
from zerogate.contracts.plan import StepTime
from zerogate.contracts.records import OVERFLOW_REASON, EvalRecord
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.predict.setup import setup_from_config

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


# --- the GPU check's micro-batch search (tests/gpu/check_search.py) ----------------------------------------


def fitting_up_to(largest: int, tried: list[int]):
    def try_batch(micro_batch: int) -> str:
        tried.append(micro_batch)
        return "trained" if micro_batch <= largest else "out of memory"

    return try_batch


def test_the_search_finds_the_largest_fit_from_below_and_from_above():
    for start, largest in ((8, 37), (100, 37), (37, 37), (1, 1), (512, 300)):
        tried = []
        found = search_largest(fitting_up_to(largest, tried), start)
        assert (found["largest"], found["status"]) == (largest, "found"), (start, largest)
        assert [p["micro_batch"] for p in found["probes"]] == tried
        assert len(tried) == len(set(tried)) <= 20


def test_the_search_says_when_nothing_fits_or_everything_does():
    assert search_largest(fitting_up_to(0, []), 4) | {"probes": []} == {
        "largest": None,
        "status": "none fits",
        "probes": [],
    }
    found = search_largest(fitting_up_to(10_000, []), 4, upper=64)
    assert (found["largest"], found["status"]) == (64, "at the search's upper bound 64")


def test_a_failure_or_the_budget_ends_the_search_unfinished_with_what_it_knew():
    answers = iter(["trained", "out of budget"])
    found = search_largest(lambda micro_batch: next(answers), 4)
    assert found == {
        "largest": 4,
        "status": "unfinished: out of budget",
        "probes": [{"micro_batch": 4, "outcome": "trained"}, {"micro_batch": 8, "outcome": "out of budget"}],
    }


def test_a_search_stopped_after_its_first_probe_goes_on_where_it_stopped():
    tried = []
    search = Search(8).run(fitting_up_to(37, tried), probes=1)
    assert tried == [8] and not search.done
    assert search.result()["status"] == "unfinished: out of budget"
    assert search.run(fitting_up_to(37, tried)).result() == search_largest(fitting_up_to(37, []), 8)


def test_a_resumed_search_goes_on_from_the_earlier_calls_probes():
    """The earlier calls' fits and refusals bound the search; this call's probes come after them, and a
    refusal at or below a fit (not repeatable to the byte) is left out."""
    tried = []
    earlier = [{"micro_batch": 11, "outcome": "trained"}, {"micro_batch": 22, "outcome": "out of budget"}]
    found = resumed(11, earlier).run(fitting_up_to(16, tried)).result()
    assert tried == [22, 16, 19, 17] and found["largest"] == 16 and found["status"] == "found"
    assert found["probes"][0] == {"micro_batch": 11, "outcome": "trained", "earlier": True}
    assert len(found["probes"]) == 5
    noisy = [{"micro_batch": 8, "outcome": "out of memory"}, {"micro_batch": 12, "outcome": "trained"}]
    search = resumed(4, noisy)
    assert (search.fits, search.refused) == (12, None)
    assert resumed(6, [{"micro_batch": 9, "outcome": "out of memory"}]).next_batch() == 4


def faked_search(tmp_path, monkeypatch, plan_of, outcome_of_probe):
    """The zero3 grid point, searched on an H200's fingerprint with the planner and the launches faked:
    ``plan_of(machine)`` the plan's largest micro-batch, ``outcome_of_probe(micro_batch, cap_bytes)`` each
    probe's outcome; returns the point and the probes launched (micro-batch, cap, deadline)."""
    gpu_fingerprint(("NVIDIA H200", 139.8)).write(tmp_path / "fingerprint.json")
    launched = []

    class Plan:
        def __init__(self, machine):
            self.largest_micro_batch_per_rank = plan_of(machine)
            self.largest_micro_batch_fits_per_rank = self.largest_micro_batch_may_fit_per_rank = None

    def fake_launch(point, dataset, out, deadline, cap_bytes=None):
        micro_batch = int(str(out).rsplit("mb", 1)[1])
        launched.append((micro_batch, cap_bytes, deadline))
        return Launch(outcome_of_probe(micro_batch, cap_bytes), 1.0, [], "")

    monkeypatch.setattr(check_search, "plan_point", lambda point, machine: Plan(machine))
    monkeypatch.setattr(check_search, "render_point", lambda name, profile, fingerprint, out: name)
    monkeypatch.setattr(check_search, "launch", fake_launch)
    profile = tmp_path / "zero3.yaml"
    profile.write_text("{}")
    return Point("zero3", profile, None, profile, profile, profile), launched


def test_every_probe_of_the_search_runs_capped_at_its_card_and_within_the_budget(tmp_path, monkeypatch):
    """The search's launches carry the card's capacity as the cap and the check's deadline as their own: a
    probe that ran uncapped would measure the H200, not the card."""
    cards = {card.name: card.memory_total_bytes for card in load_description(CLAIMED_BOX).gpus}
    plans = {"NVIDIA GeForce RTX 5070": 3, "NVIDIA GeForce RTX 4090": 9}

    def outcome(micro_batch, cap_bytes):
        fits = cap_bytes == cards["NVIDIA GeForce RTX 4090"] or micro_batch <= 4
        return "trained" if fits else "out of memory"

    point, launched = faked_search(
        tmp_path, monkeypatch, lambda machine: plans[machine.gpus[0].name], outcome
    )
    budget = Budget(deadline=4e9, launch_s=1.0)
    found = search_points({"zero3": point}, {"zero3": tmp_path}, tmp_path, budget, "cuda")
    assert {(row.card, row.largest) for row in found} == {
        ("NVIDIA GeForce RTX 5070", 4),
        ("NVIDIA GeForce RTX 4090", 512),
    }
    assert {cap for _, cap, _ in launched} == set(cards.values())
    assert {deadline for _, _, deadline in launched} == {4e9}
    # What the process holds outside the allocator takes from the card too: the probes' cap is the rest.
    launched.clear()
    outside = 1_700 * 2**20
    found = search_points({"zero3": point}, {"zero3": tmp_path}, tmp_path, budget, "cuda", None, outside)
    assert {cap for _, cap, _ in launched} == {cap - outside for cap in cards.values()}
    assert {(r.allocator_cap_bytes, r.outside_allocator_bytes) for r in found} == {
        (cap - outside, outside) for cap in cards.values()
    }
    assert {row.planned_capacity_bytes for row in found} == set(cards.values())


def test_what_the_process_holds_outside_the_allocator_is_the_runs_largest_gap_or_the_probes():
    """The device reading less the allocator's reserve, the largest over the trained runs' steps; with no run
    measured, the probe's reading after its first collective; with neither, None."""
    records = [
        step_record(step=s, max_reserved_gib=1.0, nvml_process_peak_gib=n) for s, n in ((1, 2.5), (2, 2.75))
    ]
    runs = [
        {"point": "zero3", "launch": Launch("trained", 1.0, records, "")},
        {"point": "zero2-offload", "launch": None},
    ]
    assert check_search.outside_of(runs, {"after_nccl(bytes)": 5}) == int(2.75 * 2**30) - 2**30
    assert check_search.outside_of(runs[1:], {"after_nccl(bytes)": 5}) == 5
    assert check_search.outside_of(runs[1:], {"not_run": "CPU mode"}) is None


def test_the_search_can_be_kept_to_one_card_of_the_claimed_box(tmp_path, monkeypatch):
    """--search-card keeps the search to the cards whose name holds it; a name no card holds, like a point
    that is not one and a recorded check without its file, is refused before anything is built."""
    point, launched = faked_search(tmp_path, monkeypatch, lambda machine: 2, lambda m, cap: "out of memory")
    budget = Budget(deadline=4e9, launch_s=1.0)
    found = search_points({"zero3": point}, {"zero3": tmp_path}, tmp_path, budget, "cuda", "5070")
    assert [row.card for row in found] == ["NVIDIA GeForce RTX 5070"]
    assert {cap for _, cap, _ in launched} == {found[0].cap_bytes}
    monkeypatch.setattr(check_runs, "build_ops", lambda kind: pytest.fail("built before the refusal"))
    argv = ["--out", str(tmp_path), "--work", str(tmp_path), "--deadline", "1", "--budget-s", "1"]
    args = check_runs.parse_args([*argv, "--search-card", "A100"])
    assert check_runs.check(args) == 2
    assert check_runs.check(check_runs.parse_args([*argv, "--resume", str(tmp_path / "nowhere")])) == 2
    assert check_runs.check(check_runs.parse_args([*argv, "--launch", "zero4"])) == 2


def trained(micro_batch: int) -> dict:
    return {"micro_batch": micro_batch, "outcome": "trained"}


def test_a_search_goes_on_at_a_recorded_cap_near_its_own_and_ignores_others(tmp_path, monkeypatch):
    """--resume: a recorded row of the same point and card whose allocator cap lies within the tolerance of
    this call's goes on from its probes at its cap; one capped elsewhere (the card's whole capacity, before
    the outside memory was taken off) is not used."""
    small = min(load_description(CLAIMED_BOX).gpus, key=lambda card: card.memory_total_bytes)
    outside = 1_706 * 2**20
    point, probes = faked_search(
        tmp_path, monkeypatch, lambda machine: 11, lambda m, cap: "trained" if m <= 12 else "out of memory"
    )
    recorded_cap = small.memory_total_bytes - outside + 2 * 2**20
    base = {
        "point": "zero3",
        "card": small.name,
        "cap_bytes": small.memory_total_bytes,
        "plan": 11,
        "status": "unfinished: out of budget",
    }
    earlier = [
        MicroBatchRow.of(
            {**base, "allocator_cap(bytes)": recorded_cap, "largest": 11, "probes": [trained(11)]}, "recorded"
        ),
        # capped at the whole capacity
        MicroBatchRow.of({**base, "largest": 16, "probes": [trained(16)]}, "recorded"),
    ]
    budget = Budget(deadline=4e9, launch_s=1.0)
    found = search_points(
        {"zero3": point}, {"zero3": tmp_path}, tmp_path, budget, "cuda", "5070", outside, earlier
    )
    launched = [(micro_batch, cap) for micro_batch, cap, _ in probes]
    assert launched == [(22, recorded_cap), (16, recorded_cap), (13, recorded_cap), (12, recorded_cap)]
    assert found[0].largest == 12 and found[0].allocator_cap_bytes == recorded_cap
    assert [p.micro_batch for p in found[0].probes] == [11, 22, 16, 13, 12]
    assert [p.earlier for p in found[0].probes] == [True, False, False, False, False]
    probes.clear()
    far = [earlier[0].model_copy(update={"allocator_cap_bytes": recorded_cap + 64 * 2**20})]
    search_points({"zero3": point}, {"zero3": tmp_path}, tmp_path, budget, "cuda", "5070", outside, far)
    assert probes[0][:2] == (11, small.memory_total_bytes - outside)


def test_the_step_time_row_judges_the_median_of_the_updating_steps_after_the_first():
    """check_results.step_time_row: the plan's interval against the measured median optimizer step, the
    first step and the steps fp16 skipped left out (zerogate.analysis.measures.step_time)."""
    predicted = StepTime(
        **{"low(s)": 0.4, "high(s)": 0.6, "micro_step_low(s)": 0.4, "micro_step_high(s)": 0.6},
        deciding_term="backward",
        accumulation=1,
        overlap="serial",
        terms=[],
        missing=["all-reduces per boundary: latency (no figure)"],
    )
    records = [
        step_record(step=1, step_time_s=3.0),
        step_record(step=2, step_time_s=0.1, skip_reason=OVERFLOW_REASON, loss_scale=2.0**15),
        step_record(step=3, step_time_s=0.5, loss_scale=2.0**15),
        step_record(step=4, step_time_s=0.7, loss_scale=2.0**15),
        step_record(step=5, step_time_s=0.55, loss_scale=2.0**15),
    ]
    row = step_time_row("zero3", SimpleNamespace(step_time=predicted), records)
    assert row["measured_median(s)"] == pytest.approx(0.55)
    assert row["inside"] is True and row["middle_error(%)"] == pytest.approx(100 * (0.5 - 0.55) / 0.55)
    assert row["deciding_term"] == "backward" and len(row["missing"]) == 1
    slow = step_time_row("zero3", SimpleNamespace(step_time=predicted), [*records[:1], *records[2:4]])
    assert slow["measured_median(s)"] == pytest.approx(0.6) and slow["inside"] is True
    unplanned = step_time_row("zero3", SimpleNamespace(step_time=None), records)
    assert unplanned["inside"] is None and unplanned["middle_error(%)"] is None
    assert (
        step_time_row("zero3", SimpleNamespace(step_time=predicted), records[:1])["measured_median(s)"]
        is None
    )


def test_a_point_is_micro_benchmarked_in_a_process_of_its_own_or_says_why_not(tmp_path, monkeypatch):
    """measure_rates: tests/gpu/microbench_point.py on the point's rendered files; a failure is recorded with
    its exit and output."""
    answers = iter([(0, ""), (1, "RuntimeError: no op")])

    def fake_run(command, **kwargs):
        assert command[2:6] == [
            "tests.gpu.microbench_point",
            str(tmp_path / "spec"),
            str(tmp_path / "ds"),
            str(tmp_path / "fingerprint.json"),
        ]
        code, err = next(answers)
        return subprocess.CompletedProcess(command, code, "", err)

    monkeypatch.setattr(check_runs.subprocess, "run", fake_run)
    point = Point("a", tmp_path, None, tmp_path / "ds", tmp_path / "spec", tmp_path)
    assert check_runs.measure_rates(point, tmp_path)["path"] == str(tmp_path / "rendered/a/microbench.json")
    assert check_runs.measure_rates(point, tmp_path) == {"not_run": "exit 1: RuntimeError: no op"}


def test_a_run_whose_every_step_skipped_its_update_did_not_train():
    """fp16's first steps overflow and skip the update, and the optimizer's states come at the first update:
    a run of skipped steps never reached its peak, so it neither trained nor fits."""
    skipped = [step_record(step=s, skip_reason=OVERFLOW_REASON, loss_scale=2.0**16) for s in (1, 2)]
    updated = step_record(step=3, loss_scale=2.0**15)
    assert outcome_of(0, "", skipped).startswith("no update: each of its 2 steps skipped")
    assert outcome_of(0, "", [*skipped, updated]) == "trained"
    assert outcome_of(1, "torch.OutOfMemoryError: CUDA out of memory", []) == "out of memory"
    assert outcome_of(1, "", []) == "failed (exit 1)"
    assert outcome_of(None, "", []) == "killed at the deadline"


def test_the_readings_outside_the_allocator_come_from_their_own_process_or_say_why_not(monkeypatch):
    """The process_memory module prints one JSON line; a failure is recorded with its exit and output."""
    printed = '{"context(bytes)": 1, "after_cublas(bytes)": 2, "after_nccl(bytes)": 3}'
    answers = iter([(0, "loading\n" + printed + "\n"), (1, "")])

    def fake_run(command, **kwargs):
        assert command[-2:] == ["-m", "tests.gpu.process_memory"]
        code, out = next(answers)
        return subprocess.CompletedProcess(command, code, out, "RuntimeError: NCCL error")

    monkeypatch.setattr(check_launch.subprocess, "run", fake_run)
    assert process_memory("cuda", {}) == {
        "context(bytes)": 1,
        "after_cublas(bytes)": 2,
        "after_nccl(bytes)": 3,
    }
    assert process_memory("cuda", {}) == {"not_run": "exit 1: RuntimeError: NCCL error"}
    assert process_memory("cpu", {}) == {"not_run": "CPU mode: no CUDA context"}


def test_a_recorded_gpu_check_is_judged_again_against_its_own_steps(tmp_path):
    """tests/gpu/replan.py: every point planned now for the recorded H200, each level against the largest
    reading the recorded steps hold; a CPU-mode record is refused, naming its file and key."""
    calls = [REPO / "tests/data/gpu_check/h200-2026-12-04" / f"call{n}" for n in (1, 2, 3, 5, 6)]
    cards = load_description(CLAIMED_BOX).gpus
    held_out = held_out_points()[:1]  # one held-out point: each takes seconds to plan
    levels, micro_batches = replan(calls, held_out)
    steps = [json.loads(line) for call in calls for line in (call / "steps.jsonl").read_text().splitlines()]
    names = [*POINTS, *(point["id"] for point in held_out)]
    assert [row["point"] for row in levels] == [name for name in names for _ in LEVELS]
    # Each recorded search row whose probes launched stands, planned for the card its probes measured: their
    # allocator cap plus what the process held outside the allocator in their call (rows capped at the card's
    # capacity itself, before the check took that off, record neither: the cap was the capacity, the outside
    # memory the call's largest gap). Every point and card also has its row for the card's own capacity.
    seen = set()
    for call in reversed(calls):  # the last call's row where several launched probes on the same card
        call_steps = [json.loads(line) for line in (call / "steps.jsonl").read_text().splitlines()]
        gap = max(s["device_peak_nvml(bytes)"] - s["allocator_peak(bytes)"] for s in call_steps)
        for then in json.loads((call / "micro_batch.json").read_text()):
            if all(probe["outcome"] == "out of budget" for probe in then["probes"]):
                continue
            card = then.get("allocator_cap(bytes)", then["cap_bytes"])
            card += then.get("outside_allocator(bytes)", gap)
            if (then["point"], then["card"], card) in seen:
                continue
            seen.add((then["point"], then["card"], card))
            same = [
                now
                for now in micro_batches
                if (now.point, now.card, now.planned_capacity_bytes) == (then["point"], then["card"], card)
            ]
            assert len(same) == 1, (call.name, then["point"])
            assert [p.as_json() for p in same[0].probes] == [{**p, "earlier": False} for p in then["probes"]]
            assert same[0].largest == then["largest"]
    on_their_card = [(r.point, r.card) for r in micro_batches if r.planned_capacity_bytes == r.cap_bytes]
    assert sorted(on_their_card) == sorted((point, card.name) for point in POINTS for card in cards)
    for now in micro_batches:
        assert 0 <= now.plan_fits <= now.plan_may_fit and now.plan >= 0
    reading_of = {level: reading for level, _, reading in LEVELS}
    for row in levels:
        key = reading_of[row["level"]]
        recorded = [s[key] for s in steps if s["point"] == row["point"]]
        assert row["measured(bytes)"] == (max(recorded) if recorded else None)
        assert row["predicted(bytes)"] > 0 and (row["error(%)"] is None) == (not recorded)
        interval = row["predicted_range(bytes)"]
        if row["level"] != "device":
            assert interval is None and row["inside"] is None
        else:
            low, high = interval
            assert low <= row["predicted(bytes)"] <= high
            assert row["inside"] == (None if not recorded else low <= max(recorded) <= high)
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "check.json").write_text(json.dumps({"mode": "cpu"}))
    with pytest.raises(SystemExit, match="check.json: mode: want cuda"):
        replan([cpu])


def test_no_cap_without_the_variable():
    assert cap_device({}) is None


def test_the_gpu_mode_renders_a_half_billion_model_in_fp16_with_dynamic_loss_scaling(tmp_path):
    """What the lent GPU will train, rendered here for an H200's fingerprint: each point its own scheme, fp16
    with DeepSpeed's dynamic loss scale, one rank at micro-batch 1; the claim's small card planned."""
    fingerprint = gpu_fingerprint(("NVIDIA H200", 139.8))
    machine = from_fingerprint(fingerprint, "h200")
    small_card = min(load_description(CLAIMED_BOX).gpus, key=lambda card: card.memory_total_bytes)
    schemes = {}
    for name, path in write_grid(tmp_path, "cuda").items():
        point = render_point(name, path, fingerprint, tmp_path / name)
        ds_config = json.loads(point.ds_config.read_text())
        assert ds_config["fp16"]["enabled"] is True and ds_config["fp16"]["loss_scale"] == 0, name
        assert (
            ds_config["train_micro_batch_size_per_gpu"] == 1 and ds_config["gradient_accumulation_steps"] == 1
        )
        assert RunSpec.read(point.run_spec).world_size == 1
        assert point.settings.training.optimizer_steps == STEPS["cuda"]
        schemes[name] = setup_from_config(DsConfig.read(point.ds_config), RunSpec.read(point.run_spec)).scheme
    assert schemes == {
        "zero3": "zero3",
        "zero3-offload": "zero3_offload_optimizer",
        "zero3-offload-all": "zero3_offload_all",
        "zero2-offload": "zero2_offload_optimizer",
    }
    plan = plan_point(
        point, capped_machine(machine, small_card)
    )  # the last point: ZeRO-2, optimizer offloaded
    assert 5e8 > plan.ledger.parameters > 4.9e8
    assert plan.machine.endswith(small_card.name) and plan.largest_micro_batch_per_rank >= 1


def test_the_held_out_points_keep_the_short_run_and_change_only_what_they_name(tmp_path):
    """The GPU mode's held-out points (tests/gpu/held_out_points.yaml), rendered for an H200's fingerprint:
    the grid's short run (steps, one rank, fp16 with the dynamic loss scale) with each point's model,
    sequence length, micro-batch and checkpointing, the scheme of the variant it names; a dataset per
    sequence length."""
    fingerprint = gpu_fingerprint(("NVIDIA H200", 139.8))
    held_out = held_out_points()
    profiles = write_grid(tmp_path, "cuda", held_out)
    assert list(profiles) == [*POINTS, *(spec["id"] for spec in held_out)]
    points = {name: render_point(name, path, fingerprint, tmp_path / name) for name, path in profiles.items()}

    def scheme(name: str) -> str:
        return setup_from_config(
            DsConfig.read(points[name].ds_config), RunSpec.read(points[name].run_spec)
        ).scheme

    for spec in held_out:
        point, stated = points[spec["id"]], spec["overrides"]
        training, ds_config = point.settings.training, json.loads(point.ds_config.read_text())
        assert training.optimizer_steps == STEPS["cuda"] and RunSpec.read(point.run_spec).world_size == 1
        assert ds_config["fp16"]["enabled"] is True and ds_config["fp16"]["loss_scale"] == 0
        assert ds_config["train_micro_batch_size_per_gpu"] == stated["training"]["micro_batch_per_rank"]
        assert training.activation_checkpointing is stated["training"]["activation_checkpointing"]
        assert point.settings.dataset.seq_len == stated["dataset"]["seq_len"]
        assert point.settings.model.config == stated["model"]["config"]
        assert scheme(spec["id"]) == scheme(spec["zero"])
    datasets = prepare_datasets(points, tmp_path / "work")
    assert set(datasets) == set(points)
    seq_lens = {point.settings.dataset.seq_len for point in points.values()}
    assert len(set(datasets.values())) == len(seq_lens) == 3


def test_the_runs_spend_the_budget_on_launches_and_are_planned_after(tmp_path, monkeypatch):
    """Planning needs no device: train_points launches without planning (on the lent H200 the eight points'
    plans took 74 s of a call's budget before any launch); a launch the budget cannot hold is recorded as
    not run; plan_runs then plans every run's point."""

    def no_planning(point, machine):
        raise AssertionError("planned before the launches")

    order = []

    def fake_launch(point, dataset, out, deadline):
        order.append(("launch", point.name))
        return Launch("trained", 60.0, [], "")

    def fake_rates(point, work):
        order.append(("micro-benchmarks", point.name))
        return {"not_run": "faked"}

    monkeypatch.setattr(check_runs, "plan_point", no_planning)
    monkeypatch.setattr(check_runs, "launch", fake_launch)
    monkeypatch.setattr(check_runs, "measure_rates", fake_rates)
    training = type("Training", (), {"optimizer_steps": 6})
    settings = type("Settings", (), {"training": training})
    points = {name: Point(name, tmp_path, settings, tmp_path, tmp_path, tmp_path) for name in "abc"}
    budget = Budget(deadline=time.time() + 45 + check_runs.MICROBENCH_S, launch_s=10.0)
    runs = train_points(points, dict.fromkeys(points, tmp_path), tmp_path, budget, ["a", "b"])
    assert [(run["point"], run["launch"] is not None) for run in runs] == [
        ("a", True),
        ("b", False),
        ("c", False),
    ]
    assert runs[1]["not_run"] == "not launched: out of budget" and "--launch" in runs[2]["not_run"]
    assert order == [("micro-benchmarks", "a"), ("launch", "a")] and runs[0]["rates"] == {"not_run": "faked"}
    gpu_fingerprint(("NVIDIA H200", 139.8)).write(tmp_path / "fingerprint.json")
    monkeypatch.setattr(check_runs, "plan_point", lambda point, machine: (point.name, machine.gpus[0].name))
    planned = plan_runs(runs, points, tmp_path)
    assert [run["plan"] for run in planned] == [(name, "NVIDIA H200") for name in "abc"]


def test_the_checks_files_round_trip_through_their_contract_and_a_broken_one_is_named(tmp_path):
    """tests/gpu/check_files.py: every recorded call's steps and searches read back as written; a renamed key
    or a file that is not a list is refused in one line naming the file, the row and the field."""
    for call in sorted((REPO / "tests/data/gpu_check/h200-2026-12-04").iterdir()):
        steps = check_files.read_steps(call)
        check_files.write_steps(tmp_path, steps)
        assert check_files.read_steps(tmp_path) == steps
        searches = check_files.read_micro_batches(call)
        check_files.write_micro_batches(tmp_path, searches)
        assert check_files.read_micro_batches(tmp_path) == searches
        recorded = json.loads((call / "micro_batch.json").read_text())
        assert [row.probe_cap for row in searches] == [
            row.get("allocator_cap(bytes)", row["cap_bytes"]) for row in recorded
        ]
    broken = [{**recorded[0], "largest_micro_batch": recorded[0]["largest"]}]
    del broken[0]["largest"]
    (tmp_path / "micro_batch.json").write_text(json.dumps(broken))
    with pytest.raises(ContractError, match=r"micro_batch.json\[0\]: largest: Field required"):
        check_files.read_micro_batches(tmp_path)
    (tmp_path / "micro_batch.json").write_text("{}")
    with pytest.raises(ContractError, match="a JSON list of searches was expected"):
        check_files.read_micro_batches(tmp_path)
    line = json.loads((call / "steps.jsonl").read_text().splitlines()[0])
    (tmp_path / "steps.jsonl").write_text(json.dumps({**line, "step_time(s)": "fast"}) + "\n")
    with pytest.raises(ContractError, match=r"steps.jsonl:1: step_time\(s\)"):
        check_files.read_steps(tmp_path)
