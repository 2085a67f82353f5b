"""The planner judged against published setups: the table's checks (zerogate.config.published_setups), a
row turned into a run and planned (zerogate.bench.planner_validation), the judging
(zerogate.analysis.planner_validation); the validate_planner rule from a clean copy of the workflow is
tests/integration/test_validate_planner.py. Rows are the shipped table's; plans are the planner's own."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from tests.unit.helpers import broken_copy
from tests.unit.test_ledger import claim_setup
from zerogate.analysis.planner_validation import (
    ESTIMATOR_ROUNDING,
    LARGEST_WITHIN,
    MAY_NOT_FIT,
    VERDICT_AGREES,
    PrintedFigure,
    Spread,
    judge_largest_micro_batch,
    judge_outcome,
    judge_printed,
    printed_interval,
    summarise,
)
from zerogate.bench import measured_rows
from zerogate.bench import planner_validation as validation
from zerogate.config.published_setups import UNPLANNED_PLATFORMS, read_setups
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS
from zerogate.errors import InputError
from zerogate.model.hf_config import load_config
from zerogate.predict.peak import peak_prediction

REPO = Path(__file__).resolve().parents[2]
SETUPS = REPO / validation.SETUPS_FILE
GIB, MIB = 2**30, 2**20


@pytest.fixture(scope="module")
def table():
    return read_setups(SETUPS, validation.SETUPS_FILE)


def row(table, row_id):
    return next(r for r in table.setups if r.id == row_id)


_PLANNED: dict[tuple[str, int | None], measured_rows.MeasuredRun] = {}


def planned(table, row_id, micro_batch=None):
    """The row's run planned (at ``micro_batch``), once per module: the tests only read it."""
    if (row_id, micro_batch) not in _PLANNED:
        found = row(table, row_id)
        config = load_config(REPO / found.model.config)
        _PLANNED[row_id, micro_batch] = measured_rows.plan_measured(found, config, REPO, micro_batch)
    return _PLANNED[row_id, micro_batch]


# ---- the table ---------------------------------------------------------------------------------------------


def test_the_shipped_table_reads_with_every_kind_and_at_least_six_measured_results(table):
    kinds = [r.kind for r in table.setups]
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "estimator_table": 41,
        "paper_figure": 22,
        "measured": 33,
    }
    assert sum(1 for r in table.setups if r.kind == "measured" and r.published.largest_micro_batch) == 2
    assert (
        sum(1 for r in table.setups if r.kind == "measured" and r.published.outcome == "out_of_memory") >= 6
    )


@pytest.mark.parametrize(
    "index, change, where, problem",
    [
        (5, lambda r: r["setup"].update(zero_stage=5), "setup.zero_stage", "Input should be 2 or 3"),
        (
            45,
            lambda r: r["published"].pop("printed_resolution"),
            "published.printed_resolution",
            "Field required",
        ),
        (
            70,
            lambda r: r["published"].pop("oom_memory"),
            "published.oom_memory",
            "required for an out_of_memory outcome",
        ),
        (70, lambda r: r["setup"].update(seq_len="long"), "setup.seq_len", "Input should be a valid integer"),
        (70, lambda r: r["setup"].update(attention="flash"), "setup.attention", "Input should be 'sdpa'"),
        (4, lambda r: r["setup"].pop("zero_init"), "setup.zero_init", "required for a ZeRO-3 per-CPU figure"),
        (3, lambda r: r.update(kind="guess"), "kind", "Input tag 'guess' found using 'kind' does not match"),
        (
            3,
            lambda r: r["changed_since_printed"][0].update(deepspeed_version="soon"),
            "changed_since_printed.0.deepspeed_version",
            "String should match pattern",
        ),
        (
            70,
            lambda r: r["setup"].update(deepspeed_version="latest"),
            "setup.deepspeed_version",
            "String should match pattern",
        ),
        (
            16,
            lambda r: r.update(
                changed_since_printed=[
                    {"figure": "per_cpu", "deepspeed_version": "0.14.3", "change": "x", "formulas": "y"}
                ]
            ),
            "changed_since_printed.0.figure",
            "the row prints no per-CPU figure",
        ),
    ],
)
def test_a_malformed_row_is_refused_with_one_line_naming_the_file_row_and_key(
    tmp_path, index, change, where, problem
):
    path = broken_copy(SETUPS, tmp_path, index, change)
    with pytest.raises(InputError) as error:
        read_setups(path, "mine.yaml")
    raw_id = yaml.safe_load(SETUPS.read_text())["setups"][index]["id"]
    message = str(error.value)
    assert message.startswith(f"mine.yaml: setups[{index}] ({raw_id}): {where}: {problem}"), message
    assert "\n" not in message


def test_a_duplicate_id_and_a_model_config_that_does_not_load_are_refused_before_any_planning(
    tmp_path, monkeypatch
):
    path = broken_copy(SETUPS, tmp_path, 1, lambda r: r.update(id="ds-memory-t5-3b-z2-live-1x8-offopt-cpu"))
    with pytest.raises(
        InputError,
        match=r"setups\[1\] \(ds-memory-t5-3b-z2-live-1x8-offopt-cpu\): id: also the id "
        r"of setups\[0\]",
    ):
        read_setups(path)
    # A row naming a config that is not there: refused naming the row's key, and nothing is planned first.
    copy = tmp_path / "repo"
    (copy / "config" / "published_setups").mkdir(parents=True)
    shutil.copytree(REPO / "config" / "models", copy / "config" / "models")
    broken_copy(
        SETUPS,
        copy / "config" / "published_setups",
        70,
        lambda r: r["model"].update(config="config/models/none.json"),
    )
    planned_rows = []
    monkeypatch.setattr(validation, "check_measured_row", lambda *a: planned_rows.append(a))
    monkeypatch.setattr(validation, "check_estimator_row", lambda *a: planned_rows.append(a))
    with pytest.raises(InputError) as error:
        validation.validate(copy)
    measured_id = yaml.safe_load(SETUPS.read_text())["setups"][70]["id"]
    assert str(error.value).startswith(
        f"{validation.SETUPS_FILE}: setups[70] ({measured_id}): model.config: "
    )
    assert "none.json: no such file" in str(error.value) and planned_rows == []


# ---- a measured row as a run ---------------------------------------------------------------------------


def test_a_measured_row_is_rendered_and_planned_with_its_stage_offloads_precision_geometry_and_gpus(table):
    run = planned(table, "llamafactory-5977-llama3-8b-8x3090-z3-offload-fits-13g")
    zero = run.ds_config.zero_optimization
    assert (zero.stage, zero.offload_optimizer.device, zero.offload_param.device) == (3, "cpu", "cpu")
    assert (run.ds_config.train_micro_batch_size_per_gpu, run.ds_config.gradient_accumulation_steps) == (1, 2)
    assert (run.run_spec.dtype, run.run_spec.world_size, run.run_spec.seq_len) == ("fp16", 8, 1024)
    assert (run.plan.scheme, run.plan.ranks, run.plan.dtype) == ("zero3_offload_all", 8, "fp16")
    # The row states the 3090's 24 GB; the checks are against what CUDA gives a process on one (23.69 GiB).
    assert run.machine.gpus[0].memory_total_bytes == 24 * GIB
    assert [c.capacity_bytes for c in run.plan.device_checks] == [round(23.69 * GIB)] * 8
    assert run.plan.ledger.parameters == 8_030_261_248  # Llama-3-8B counted on the meta device
    # The verdicts read the checks alone; the whole plan, built on demand, holds the same ones.
    assert (run.scheme, run.ranks, run.dtype) == (run.plan.scheme, run.plan.ranks, run.plan.dtype)
    assert run.checks == run.plan.checks
    bf16 = planned(table, "openrlhf-698-llama3-8b-1xa100-80g-z2-oom")
    assert (bf16.run_spec.dtype, bf16.plan.scheme, bf16.plan.ranks) == ("bf16", "zero2", 1)
    assert (
        planned(
            table, "openrlhf-698-llama3-8b-1xa100-80g-z2-oom", micro_batch=3
        ).ds_config.train_micro_batch_size_per_gpu
        == 3
    )


def test_what_a_row_states_reaches_the_plan_and_what_the_settings_cannot_say_is_listed_not_dropped(table):
    run = planned(table, "deepseek-math-7b-2x4090-case6-z3-offopt-offparam-ckpt-fits")
    assert run.run_spec.training.activation_checkpointing is True and run.not_expressed == ()
    zephyr = planned(table, "alignment-handbook-zephyr-7b-sft-full-8xa100-80g-z3-mb32")  # flash_attention_2
    assert zephyr.run_spec.model.attention == "sdpa"
    assert [note for note in zephyr.not_expressed if note.startswith("attention flash_attention_2")]


def test_a_row_whose_source_leaves_out_what_the_plan_needs_is_not_judged(table):
    ddp = row(table, "hf-blog-accelerate-ds-gpt2-xl-ddp-oom-titanrtx")  # the blog does not say its precision
    checked = validation.check_measured_row(ddp, load_config(REPO / ddp.model.config), REPO)
    assert [(c.verdict, c.basis) for c in checked.checks] == [
        (NOT_MEASURED, "the source does not state setup.dtype, which the plan needs")
    ]


def test_the_releases_a_row_states_are_planned_and_a_platform_the_planner_does_not_model_is_not_judged(
    table,
):
    swift = row(table, "ms-swift-2947-qwen2.5-14b-8xa800-z3-oom")  # torch 1.13.1+cu116, transformers 4.40.0
    stated = measured_rows.stated_releases(swift, claim_setup())
    assert (stated.transformers_version, stated.cuda_module_loading) == ((4, 40, 0), "eager")
    assert stated.deepspeed_version is None  # not stated: the installed one
    llama = row(table, "llamafactory-5977-llama3-8b-8x3090-z3-oom")  # torch 2.5.1, DeepSpeed 0.15.3
    stated = measured_rows.stated_releases(llama, claim_setup())
    assert (stated.deepspeed_version, stated.cuda_module_loading) == ((0, 15, 3), "lazy")
    wsl2 = row(table, "xirider-19-gpt2-xl-1x3090-z2-offopt-wsl2-oom")
    checked = validation.check_measured_row(wsl2, load_config(REPO / wsl2.model.config), REPO)
    assert [(c.verdict, c.basis) for c in checked.checks] == [(NOT_MEASURED, UNPLANNED_PLATFORMS["wsl2"])]


# ---- judging
# ------------------------------------------------------------------------------------------------


def test_printed_figures_stand_for_the_interval_their_rounding_leaves():
    assert printed_interval(100 * GIB, GIB, 0.01, "nearest") == (
        100 * GIB - 0.005 * GIB - 1,
        100 * GIB + 0.005 * GIB + 1,
    )
    assert printed_interval(3291 * MIB, MIB, 1, "floor") == (3291 * MIB - 1, 3292 * MIB - 1)


def test_an_estimator_row_passes_within_its_rounding_and_fails_outside_it(table):
    hand = row(table, "ds-memory-t5-large-z3-case1-4gpus")  # memory.rst prints case1 >> 20: 3291 MB
    checked = validation.check_estimator_row(hand)
    assert [(c.quantity, c.verdict) for c in checked.checks] == [("per-GPU memory", PASS)]
    published = hand.published

    def judged(predicted_bytes):
        printed = PrintedFigure(published.per_gpu_bytes, "MB", MIB, 1, "floor")
        return judge_printed(
            "per-GPU memory", ESTIMATOR_ROUNDING, printed, Spread.exact(predicted_bytes), "test"
        ).verdict

    assert (judged(3291 * MIB + MIB - 1), judged(3292 * MIB), judged(3291 * MIB - 2)) == (PASS, FAIL, FAIL)


def test_a_live_table_is_judged_over_the_truncated_counts_it_was_printed_from(table):
    # DeepSpeed prints int(params / 1e6) M: T0_3B's "2783M" is 2783-2784 M, and its 70.00 GB per CPU is
    # reached only within that interval (the stated count gives 69.98 GB).
    live = row(table, "hf-docs-t0-3b-z3-live-1x2-par-cpu-opt-cpu-zi0")
    assert [c.verdict for c in validation.check_estimator_row(live).checks] == [PASS, PASS]
    exact = live.model_copy(
        update={"model": live.model.model_copy(update={"count_resolution": None, "count_rounding": None})}
    )
    per_cpu = validation.check_estimator_row(exact).checks[1]
    assert (per_cpu.quantity, per_cpu.verdict, round(per_cpu.predicted_value / GIB, 2)) == (
        "per-CPU memory",
        FAIL,
        69.98,
    )


def test_the_planner_column_is_used_where_it_takes_the_rows_options_and_deepspeed_where_it_does_not(table):
    with_init = validation.check_estimator_row(row(table, "ds-memory-t5-3b-z3-cold-1x8-par-cpu-opt-cpu-zi1"))
    without = validation.check_estimator_row(row(table, "ds-memory-t5-3b-z3-cold-1x8-par-cpu-opt-cpu-zi0"))
    assert all("the planner's DeepSpeed column" in c.predicted for c in with_init.checks)
    assert all("zero_init=0" in c.predicted for c in without.checks)
    assert [c.verdict for c in with_init.checks + without.checks] == [PASS] * 4
    # The per-GPU figure does not depend on zero_init: both ways give the same bytes.
    assert with_init.checks[0].predicted_value == without.checks[0].predicted_value


def test_the_paper_rows_meet_their_rounding_through_the_planners_paper_column(table):
    checked = [validation.check_paper_row(r) for r in table.setups if r.kind == "paper_figure"]
    assert len(checked) == 22 and {c.checks[0].verdict for c in checked} == {PASS}
    fig1 = validation.check_paper_row(
        row(table, "zero-paper-fig1-7.5b-nd64-pos-g-p")
    )  # 16 x 7.5e9 / 64 = 1.875
    assert fig1.checks[0].predicted_value == 1_875_000_000 and fig1.checks[0].published_value == 1_900_000_000


def device_checks(run: measured_rows.MeasuredRun) -> list:
    """The run's per-GPU memory checks (the plan's device_checks, without planning the rest of the plan)."""
    return [check for check in run.checks if check.rank is not None]


def test_a_verdict_agrees_only_when_the_plan_says_what_was_published(table):
    oom = device_checks(planned(table, "openrlhf-698-llama3-8b-1xa100-80g-z2-oom"))
    fits = device_checks(planned(table, "openrlhf-698-llama3-8b-1xa100-80g-z2-adam-offload-fits"))
    assert not oom[0].fits and fits[0].fits
    for checks, published, verdict in (
        (oom, "out_of_memory", PASS),
        (oom, "fits", FAIL),
        (fits, "fits", PASS),
        (fits, "out_of_memory", FAIL),
    ):
        plan_fits = "fits" if all(c.fits for c in checks) else "does not fit"
        memory = None if published == "fits" else "device"
        assert judge_outcome(published, memory, plan_fits, "", "").verdict == verdict


def test_a_largest_micro_batch_is_within_a_factor_1_25_or_not():
    verdicts = {
        predicted: judge_largest_micro_batch(16, predicted, "").verdict
        for predicted in (0, 12, 13, 16, 20, 21)
    }
    assert verdicts == {0: FAIL, 12: FAIL, 13: PASS, 16: PASS, 20: PASS, 21: FAIL}


def test_the_largest_micro_batch_search_finds_the_last_one_that_plans_to_fit():
    assert [measured_rows.largest_micro_batch(lambda m, t=t: m <= t) for t in (0, 1, 5, 64, 100)] == [
        0,
        1,
        5,
        64,
        100,
    ]
    assert measured_rows.largest_micro_batch(lambda m: True, limit=16) == 16
    # On the planner, from what validate_planner wrote: tests/integration/test_validate_planner.py.


def test_the_summary_counts_each_target_once_per_figure(table):
    rows = [
        validation.check_estimator_row(row(table, "ds-memory-t5-3b-z2-cold-1x8-offopt-none")),
        validation.check_paper_row(row(table, "zero-paper-fig1-7.5b-nd64-pos")),
    ]
    counts = {s.target: (s.passed, s.failed, s.not_measured) for s in summarise(rows)}
    # The row's per-GPU figure was printed by a formula DeepSpeed has since changed: not judged.
    assert counts[ESTIMATOR_ROUNDING] == (1, 0, 1) and counts["paper figure to its rounding"] == (1, 0, 0)
    assert counts[VERDICT_AGREES] == (0, 0, 0) and counts[LARGEST_WITHIN] == (0, 0, 0)


def test_a_figure_printed_by_a_formula_deepspeed_changed_is_judged_only_by_a_deepspeed_before_the_change(
    table, monkeypatch
):
    # memory.rst's ZeRO-2 table was printed with 4 + 16/N bytes per parameter on the GPU; DeepSpeed computes
    # 2 + 18/N since 0.14.3. The installed DeepSpeed cannot reproduce the printed figure.
    printed = row(table, "ds-memory-t5-3b-z2-cold-1x8-offopt-none")
    installed = validation.metadata.version("deepspeed")
    gpu, cpu = validation.check_estimator_row(printed).checks
    assert (gpu.verdict, cpu.verdict) == (NOT_MEASURED, PASS)
    assert round(gpu.predicted_value / GIB, 2) == 11.28 and round(gpu.error_percent) == -29
    assert f"the installed DeepSpeed {installed} computes the new one" in gpu.basis
    assert "Judged anyway it would be FAIL" in gpu.basis
    # A change after the installed release leaves the figure judged, and judged as it is.
    later = printed.model_copy(
        update={
            "changed_since_printed": [
                printed.changed_since_printed[0].model_copy(update={"deepspeed_version": "99.0"})
            ]
        }
    )
    assert [c.verdict for c in validation.check_estimator_row(later).checks] == [FAIL, PASS]
    # At N = 1 both formulas give 20 bytes per parameter: GPT-J's one-GPU row is judged and met.
    one_gpu = validation.check_estimator_row(row(table, "ds-issue-1883-gpt-j-6b-z2-live-1x1-offopt-none"))
    assert [c.verdict for c in one_gpu.checks] == [PASS, PASS]


# ---- what a row states, in its plan (the rule itself: tests/integration/test_validate_planner.py) ----------


def test_a_loss_on_16_bit_logits_is_planned_with_the_loss_it_states(table):
    # ColossalAI's benchmark computes its own cross-entropy on the fp16 logits: the row is planned with
    # training.loss_in_fp32 false, and its activations are traced with that loss.
    run = planned(table, "colossalai-lightning-gpt2-xl-4xa100-40g-z3-mb40-peak")
    assert run.run_spec.training.loss_in_fp32 is False and run.planned[1].loss_in_fp32 is False
    assert not any("16-bit logits" in note for note in run.not_expressed)
    counts, setup, activations = run.planned
    upcast = dataclasses.replace(setup, loss_in_fp32=True)
    assert activations(setup).saved_bytes < activations(upcast).saved_bytes
    stated = planned(table, "deepseek-math-7b-2x4090-case6-z3-offopt-offparam-ckpt-fits")
    assert stated.run_spec.training.loss_in_fp32 is True  # the row states none: transformers' own loss


def test_a_run_is_planned_for_the_deepspeed_it_states_on_the_memory_cuda_gives_its_card(table):
    # deepseek-math-7b case 5: ZeRO-2 with optimizer offload on two RTX 4090s, published out of memory ("1.56G
    # short": one fp32 copy of the 102400 x 4096 embedding's gradient is 1.5625 GiB). Its DeepSpeed (at most
    # 0.18.3) tested each gradient for overflow elementwise, which the installed one does not.
    found = row(table, "deepseek-math-7b-2x4090-case5-z2-offopt-ckpt-oom")
    assert found.setup.deepspeed_version == "0.18.3"
    run = planned(table, found.id)
    assert run.planned[1].deepspeed_version == (0, 18, 3)
    device = [c for c in run.checks if c.rank is not None]
    assert {c.capacity_bytes for c in device} == {round(23.645 * GIB)}  # CUDA's capacity of an RTX 4090
    # The card lies inside the need's interval (the CUDA terms' own uncertainty): "may not fit", which agrees
    # with the published out-of-memory; the point need is within 2 % of the card.
    assert all(
        c.verdict == MAY_NOT_FIT and c.need_low_bytes < c.capacity_bytes < c.need_high_bytes for c in device
    )
    installed = found.model_copy(update={"setup": found.setup.model_copy(update={"deepspeed_version": None})})
    today = measured_rows.plan_measured(installed, load_config(REPO / found.model.config), REPO)
    # The installed DeepSpeed's plan needs less by the elementwise overflow test's bytes (both "may not fit"
    # now: the allocator's fragmentation spans 0-33 % of its reserve).
    assert all(c.verdict == MAY_NOT_FIT for c in today.checks if c.rank is not None)
    overflow_check = 3 * 102400 * 4096  # 11 bytes per element less the fp64 copy's 8
    assert run.checks[0].need_bytes - today.checks[0].need_bytes >= overflow_check
    # The verdict says which DeepSpeed it was planned for.
    outcome = validation.check_measured_row(found, load_config(REPO / found.model.config), REPO).checks[0]
    assert outcome.verdict == PASS and "DeepSpeed 0.18.3 as the row states" in outcome.basis
    outcome = validation.check_measured_row(installed, load_config(REPO / found.model.config), REPO).checks[0]
    assert "the installed DeepSpeed" in outcome.basis


def test_a_memory_reading_is_set_against_the_level_its_metric_measures(table):
    named = row(table, "colossalai-lightning-gpt2-xl-4xa100-40g-z3-mb40-peak")
    checked = validation.check_measured_row(named, load_config(REPO / named.model.config), REPO)
    reading = next(c for c in checked.checks if c.quantity == "peak memory per GPU")
    counts, setup, activations = planned(table, named.id).planned
    levels = peak_prediction(counts, setup, None, activations).levels
    assert reading.predicted_value == levels["tensor"].predicted_bytes < levels["device"].predicted_bytes
    assert "max_memory_allocated" in reading.predicted and reading.target is None
    unnamed = row(table, "llamafactory-5977-llama3-8b-8x3090-z3-offload-fits-13g")
    checked = validation.check_measured_row(unnamed, load_config(REPO / unnamed.model.config), REPO)
    reading = next(c for c in checked.checks if c.quantity == "peak memory per GPU")
    counts, setup, activations = planned(table, unnamed.id).planned
    assert (
        reading.predicted_value
        == peak_prediction(counts, setup, None, activations).levels["device"].predicted_bytes
    )
    # The device level has an interval (the CUDA terms' own uncertainty), so the reading is judged: 13 GiB
    # read by an unnamed tool lies above the plan's whole interval (a miss the closing note reports).
    assert "plan level device" in reading.predicted and reading.target is not None and reading.verdict == FAIL
