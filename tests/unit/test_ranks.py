"""Who waits for whom: compute, communication and wait per rank (zerogate.analysis.rank_balance),
the collective clock that records the time each rank spends in collectives, and the `slow` injection."""

import json
import math
import re
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.helpers import no_events, step_record, summarised, table_of
from zerogate.analysis import columns
from zerogate.analysis.columns import COLLECTIVES_TIME, COMMUNICATION, STEP_TIME, WAIT
from zerogate.analysis.parse import run_metadata
from zerogate.analysis.rank_balance import STRAGGLER_MARGIN, rank_balance, rank_times
from zerogate.config.training import check_inject, stabiliser_settings
from zerogate.contracts.records import GitState, StabiliserSummary, TrainSummary
from zerogate.contracts.summary import RunSummary, SpikeRule
from zerogate.errors import InputError
from zerogate.runtime.collective_clock import CollectiveClock
from zerogate.train.metrics import MeasurementSources, StepMetrics
from zerogate.train.policy import FaultInjector
from zerogate.train.stabiliser import injected_loss_factor

WARMUP, STEPS = 2, 12
COMPUTE, TRANSFER, DELAY = 0.30, 0.05, 0.20


def ranks_run(
    straggler: int | None, world: int = 2, steps: int = STEPS, delay: float = DELAY, device: str = "cpu"
) -> pd.DataFrame:
    """Per-rank records of a synchronous run: every rank computes COMPUTE s (the straggler DELAY s more), then
    meets the others in collectives that take TRANSFER s once the last rank has arrived. So the step takes
    the same time on every rank, and the fast ranks sit in the collectives for the straggler's extra time."""
    records = []
    for step in range(1, steps + 1):
        jitter = 0.001 * (step % 3)  # each step a little different, the same on every rank
        slowest = COMPUTE + jitter + (delay if straggler is not None else 0.0)
        for rank in range(world):
            compute = COMPUTE + jitter + (delay if rank == straggler else 0.0)
            records.append(
                step_record(
                    rank=rank,
                    step=step,
                    step_time_s=slowest + TRANSFER,
                    collectives_s=slowest - compute + TRANSFER,
                    device=device,
                )
            )
    return table_of(records)


def run_meta(steps: pd.DataFrame, world_size: int = 2):
    """parse_logs' run metadata of a finished run of ``world_size`` ranks (its summary gives the world
    size)."""
    summary = TrainSummary(
        completed_steps=STEPS,
        resumed_from_step=None,
        world_size=world_size,
        parameters=140_000,
        stabiliser=StabiliserSummary(policy="skip", skipped_steps=0, rollbacks=0, skipped_windows=[]),
        wall_time_s=10.0,
        metrics_time_s=0.1,
        dtype="fp32",
        accelerator="cpu",
        git=GitState(commit=None, dirty=None),
    )
    return run_metadata(steps, no_events(), summary, "", STEPS)


@pytest.mark.parametrize("straggler", [0, 1])
def test_the_straggler_is_named_and_the_other_rank_waits_for_it(straggler):
    balance = rank_balance(ranks_run(straggler), WARMUP, world_size=2)
    other = 1 - straggler
    assert balance.measured and balance.problems == []
    assert balance.straggler == straggler == balance.slowest and balance.next_slowest == other
    assert balance.excess == pytest.approx(DELAY)
    assert balance.excess_ratio == pytest.approx(DELAY / (COMPUTE + 0.001))  # over the other's median compute
    assert balance.communication == pytest.approx(TRANSFER)
    assert balance.wait == {straggler: pytest.approx(0.0), other: pytest.approx(DELAY)}
    assert balance.waiting_for_straggler == {other: pytest.approx(DELAY)}
    assert balance.wait_total[other] == pytest.approx(DELAY * (STEPS - WARMUP))
    assert balance.compute[straggler] == pytest.approx(COMPUTE + 0.001 + DELAY)
    assert balance.timed_steps == STEPS - WARMUP
    assert balance.summary() == {
        "straggler_rank": straggler,
        "straggler_compute_excess_s": pytest.approx(DELAY),
        "wait_for_straggler_median_s": pytest.approx(DELAY),
    }


def test_per_step_parts_add_up_to_the_step_time():
    frame = rank_times(ranks_run(1), WARMUP)
    assert sorted(frame["step"].unique()) == list(range(WARMUP + 1, STEPS + 1))  # timed steps only
    parts = frame[columns.COMPUTE] + frame[COMMUNICATION] + frame[WAIT]
    assert parts.to_numpy() == pytest.approx(frame[STEP_TIME].to_numpy())
    assert (frame[WAIT] >= 0).all()


def test_equal_ranks_have_no_straggler():
    balance = rank_balance(ranks_run(None), WARMUP, world_size=2)
    assert balance.measured and balance.straggler is None and balance.waiting_for_straggler == {}
    assert balance.excess == pytest.approx(0.0) and balance.slowest in (0, 1)
    assert balance.wait == {0: pytest.approx(0.0), 1: pytest.approx(0.0)}
    assert balance.summary()["straggler_rank"] is None


def test_a_difference_within_the_margin_is_noise_not_a_straggler():
    pace = COMPUTE + 0.002 + TRANSFER
    within = rank_balance(ranks_run(1, delay=0.5 * STRAGGLER_MARGIN * pace), WARMUP, 2)
    beyond = rank_balance(ranks_run(1, delay=2 * STRAGGLER_MARGIN * pace), WARMUP, 2)
    assert within.straggler is None and within.slowest == 1
    assert beyond.straggler == 1


def test_three_ranks_one_straggler_both_others_wait():
    balance = rank_balance(ranks_run(2, world=3), WARMUP, world_size=3)
    assert balance.straggler == 2 and balance.waiting_for_straggler == {
        0: pytest.approx(DELAY),
        1: pytest.approx(DELAY),
    }


def test_a_missing_rank_measures_nothing_and_says_which():
    run = ranks_run(1)
    balance = rank_balance(run[run["rank"] == 0], WARMUP, world_size=2)
    assert not balance.measured and balance.straggler is None and balance.compute == {}
    assert "ranks with no timed step records: [1] of world size 2" in balance.problems
    assert balance.summary() == {
        "straggler_rank": None,
        "straggler_compute_excess_s": None,
        "wait_for_straggler_median_s": None,
    }


def test_a_truncated_rank_measures_nothing_and_names_its_missing_steps():
    run = ranks_run(1)
    truncated = run[~((run["rank"] == 1) & (run["step"] > 9))]
    balance = rank_balance(truncated, WARMUP, world_size=2)
    assert not balance.measured and balance.straggler is None and balance.wait == {}
    assert balance.problems == ["rank 1: 3 timed steps missing (10, 11, 12)"]


def test_a_gap_in_the_collective_time_measures_nothing():
    run = ranks_run(0)
    run.loc[(run["rank"] == 1) & (run["step"] == 5), COLLECTIVES_TIME] = math.nan
    balance = rank_balance(run, WARMUP, world_size=2)
    assert balance.problems == [f"rank 1: {COLLECTIVES_TIME} missing or non-finite at 1 steps (5)"]
    assert rank_times(run, WARMUP).loc[lambda f: f["step"] == 5, WAIT].isna().all()


def test_records_without_collective_times_or_on_cuda_are_not_measured():
    # The metrics layer's collective clock off: collectives(s) null in every record.
    old = rank_balance(ranks_run(1).assign(**{COLLECTIVES_TIME: None}), WARMUP, 2)
    assert not old.measured and COLLECTIVES_TIME in old.problems[0]
    cuda = rank_balance(ranks_run(1, device="cuda:0"), WARMUP, 2)
    assert not cuda.measured and "NCCL" in cuda.problems[0]
    single = rank_balance(ranks_run(None, world=1), WARMUP, 1)
    assert single.problems == ["a single rank waits for no other"]


class FakeWork:
    def __init__(self, seconds):
        self.seconds = seconds

    def wait(self):
        time.sleep(self.seconds)
        return True

    def is_completed(self):
        return False


class FakeDist:
    """Stands in for torch.distributed: a blocking all_reduce, an async all-gather, and a composite call."""

    @staticmethod
    def all_reduce(tensor, async_op=False):
        time.sleep(0.02)

    @staticmethod
    def all_gather_into_tensor(output, tensor, async_op=False):
        return FakeWork(0.03) if async_op else None

    @staticmethod
    def all_gather_object(objects, obj):
        FakeDist.all_reduce(None)  # built from another collective: counted once

    @staticmethod
    def get_rank():
        return 0


def test_the_clock_times_blocking_calls_and_async_waits_and_counts_nesting_once():
    module = FakeDist()
    clock = CollectiveClock().install((module,))
    clock.install((module,))  # installing twice does not wrap twice
    module.all_reduce(None)
    handle = module.all_gather_into_tensor(None, None, async_op=True)
    time.sleep(0.05)  # compute while the transfer is in flight: not the clock's
    assert handle.wait() is True and handle.is_completed() is False  # the handle still behaves as itself
    module.all_gather_object([], None)
    assert module.get_rank() == 0
    blocked, calls = clock.take()
    assert calls == 3
    assert 0.02 + 0.03 + 0.02 <= blocked < 0.07 + 0.04  # the 0.05 s of compute is not in it
    assert clock.take() == (0.0, 0)


def test_step_records_carry_the_steps_collective_time(tmp_path):
    clock = CollectiveClock()
    metrics = StepMetrics(
        tmp_path / "rank0.jsonl",
        0,
        __import__("torch").device("cpu"),
        sources=MeasurementSources(collectives=clock),
    )
    clock.blocked_s, clock.calls = 9.0, 9  # an evaluation's collectives, before the step: not counted
    metrics.start_step()
    clock.blocked_s, clock.calls = 0.25, 4
    record = metrics.end_step(1, 1.0, 0.5, 1e-3, 10, 2)
    assert record.collectives_s == 0.25 and record.collective_calls == 4
    metrics.close()
    line = json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[-1])  # as the rank's file holds it
    assert line[COLLECTIVES_TIME] == 0.25 and line["collective_calls"] == 4


# ---- the `slow` injection -------------------------------------------------------------------------


def test_slow_injection_delays_every_micro_step_of_its_rank_from_its_step_on():
    injector = FaultInjector({"kind": "slow", "rank": 1, "seconds": 0.05, "step": 3}, rank=1)
    assert [injector.delay_s(step) for step in range(5)] == [0.0, 0.0, 0.05, 0.05, 0.05]
    assert FaultInjector({"kind": "slow", "rank": 1, "seconds": 0.05}, rank=0).delay_s(4) == 0.0
    assert (
        FaultInjector({"kind": "slow", "seconds": 0.05}, rank=0).delay_s(0) == 0.05
    )  # rank 0, step 1 by default
    assert FaultInjector(None, rank=0).delay_s(0) == 0.0
    assert FaultInjector({"kind": "nan_loss", "step": 1}, rank=0).delay_s(0) == 0.0
    assert (
        injected_loss_factor({"kind": "slow", "rank": 0, "seconds": 0.05}, 0, 0) is None
    )  # slow poisons no loss
    started = time.perf_counter()
    injector.slow_down(3)
    assert time.perf_counter() - started >= 0.05


@pytest.mark.parametrize(
    "inject, key, problem",
    [
        ({"kind": "slow", "rank": 1}, "stabiliser.inject.seconds", "required for kind slow"),
        (
            {"kind": "slow", "rank": 1, "seconds": 0},
            "stabiliser.inject.seconds",
            "0 is not a number of seconds > 0",
        ),
        ({"kind": "slow", "rank": 1, "seconds": -0.1}, "stabiliser.inject.seconds", "-0.1 is not a number"),
        ({"kind": "slow", "rank": 1, "seconds": "0.1"}, "stabiliser.inject.seconds", "'0.1' is not a number"),
        (
            {"kind": "slow", "rank": 1, "seconds": float("inf")},
            "stabiliser.inject.seconds",
            "inf is not a number",
        ),
        ({"kind": "slow", "rank": -1, "seconds": 0.1}, "stabiliser.inject.rank", "-1 is not an integer >= 0"),
        ({"kind": "slow", "seconds": 0.1, "step": 0}, "stabiliser.inject.step", "0 is not an integer >= 1"),
        (
            {"kind": "slow", "seconds": 0.1, "every": 2},
            "stabiliser.inject.every",
            "unknown key for kind slow",
        ),
        (
            {"kind": "nan_loss", "step": 3, "seconds": 0.1},
            "stabiliser.inject.seconds",
            "unknown key for kind nan_loss",
        ),
        ({"kind": "nan_loss"}, "stabiliser.inject.step", "required for kind nan_loss"),
        ({"kind": "sluggish", "seconds": 0.1}, "stabiliser.inject.kind", "'sluggish' is not one of"),
    ],
)
def test_a_bad_injection_is_one_line_naming_the_file_and_key(inject, key, problem):
    with pytest.raises(InputError) as error:
        stabiliser_settings({"inject": inject}, where=lambda dotted: "config/profiles/mine.yaml")
    assert error.value.key == key and error.value.file == "config/profiles/mine.yaml"
    assert str(error.value).startswith(f"config/profiles/mine.yaml: {key}: {problem}")
    assert "\n" not in str(error.value)


def test_good_injections_pass():
    for inject in (
        None,
        {"kind": "slow", "rank": 1, "seconds": 0.05},
        {"kind": "slow", "seconds": 1, "step": 4},
        {"kind": "nan_loss", "step": 3, "rank": 1},
        {"kind": "loss_spike", "step": 1},
    ):
        check_inject(inject)
        assert stabiliser_settings({"inject": inject}).inject == inject


# ---- the report's "Ranks" section and figure ------------------------------------------------------


def summary_of(steps: pd.DataFrame, meta) -> RunSummary:
    """The run's summary as summarise_run makes it (the report and the figures read its rank balance)."""
    return summarised(steps, WARMUP, SpikeRule(window=16, threshold=6.0, min_history=5), run_meta=meta)


def ranks_section(steps: pd.DataFrame, meta) -> str:
    """The report's "Ranks" section as render_html renders it."""
    from zerogate.report.html import ranks_context, section

    return section("ranks", ranks_context(summary_of(steps, meta).rank_balance))


def verdict_line(page: str) -> str:
    return re.sub(r"\s+", " ", re.search(r"<p id='ranks-verdict'>(.*?)</p>", page, re.S).group(1))


@pytest.mark.parametrize("straggler", [0, 1])
def test_the_ranks_section_names_the_straggler_and_who_waits(tmp_path, straggler):
    steps = ranks_run(straggler)
    page = ranks_section(steps, run_meta(steps))
    line = verdict_line(page)
    other = 1 - straggler
    assert f"The slowest rank is <b>rank {straggler}</b>" in line
    assert f"0.2 s (66.45 %) more than the next slowest, rank {other}" in line
    assert f"rank {other} waits 0.2 s per step (2 s over the timed steps" in line
    assert "<h2 id='ranks'>Ranks</h2>" in page and "id='ranks-table'" in page


def test_the_ranks_section_without_a_straggler_or_without_records(tmp_path):
    equal = ranks_run(None)
    assert verdict_line(ranks_section(equal, run_meta(equal))).startswith("No straggler")
    run = ranks_run(1)
    only_rank1 = run[run["rank"] == 1]
    missing = verdict_line(ranks_section(only_rank1, run_meta(only_rank1)))
    assert missing == "Not measured: ranks with no timed step records: [0] of world size 2."


def test_the_ranks_figure_draws_the_measures_numbers(tmp_path):
    from zerogate.report.figures import ranks_figure

    shown = ranks_figure(
        ranks_run(1), summary_of(ranks_run(1), run_meta(ranks_run(1))), tmp_path / "ranks.png"
    )
    balance = rank_balance(ranks_run(1), WARMUP, 2)
    assert shown == {
        "ranks_measured": True,
        "straggler_rank": 1,
        "compute_median(s)": balance.compute,
        "wait_median(s)": balance.wait,
    }
    assert (tmp_path / "ranks.png").stat().st_size > 10_000
    run = ranks_run(1)
    alone = run[run["rank"] == 0]
    assert (
        ranks_figure(alone, summary_of(alone, run_meta(alone)), tmp_path / "none.png")["ranks_measured"]
        is False
    )
    assert (tmp_path / "none.png").exists()


def test_the_profile_schema_and_the_settings_check_agree_on_injections():
    import jsonschema
    import yaml

    schema = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "config/schemas/profile.schema.json").read_text()
    )
    validator = jsonschema.Draft7Validator(schema["properties"]["stabiliser"]["properties"]["inject"])
    cases = [
        None,
        {"kind": "slow", "rank": 1, "seconds": 0.05},
        {"kind": "slow", "seconds": 2, "step": 3},
        {"kind": "nan_loss", "step": 3, "rank": 1},
        {"kind": "slow", "rank": 1},
        {"kind": "slow", "seconds": 0},
        {"kind": "slow", "seconds": 0.1, "step": 0},
        {"kind": "slow", "seconds": 0.1, "rank": -1},
        {"kind": "nan_loss", "step": 2, "seconds": 1},
        {"kind": "nan_loss"},
        {"kind": "slow", "seconds": 1, "x": 1},
        {"kind": "sluggish", "seconds": 1},
    ]
    for inject in cases:
        try:
            check_inject(inject)
            settings_ok = True
        except InputError:
            settings_ok = False
        assert validator.is_valid(inject) == settings_ok, inject
