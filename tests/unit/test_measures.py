"""zerogate.analysis.measures: each quantity defined once, and every consumer giving the same number.

The agreement test builds one run whose records make the old definitions disagree (uneven ranks, so the
max per step then the median is not the median per rank then the max; a warm-up; an fp16-skipped step; a
loss spike) and reads each shared quantity through the gates' evidence, the report's run summary, the
registry, compare, the variant table and the figures. Every run is built from StepRecords
(tests.unit.helpers), every file the consumers read by its producer.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import (
    Trained,
    claim_box,
    judged_run,
    no_events,
    planned_run,
    rendered_run,
    run_spec_for,
    settings,
    step_record,
    summarised,
    table_of,
    train_summary,
    variants_table,
    with_optimizer_step_floor,
)
from zerogate.analysis import measures
from zerogate.analysis.columns import STEP_TIME, TOKENS_PER_S
from zerogate.analysis.compare import group_runs, load_run, quantity_rows
from zerogate.analysis.compare_table import comparison_table
from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.health import (
    completion_of,
    missing_values,
    nonfinite_events,
    record_completeness,
    run_completion,
    step_span,
)
from zerogate.analysis.loss_trend import ConvergenceRule, loss_convergence, loss_spikes
from zerogate.analysis.parse import parse_launcher_log, run_metadata
from zerogate.analysis.summary import run_statistics, summarise_run
from zerogate.config.judging import ConvergenceRuleSettings
from zerogate.config.training import stabiliser_settings
from zerogate.contracts.data import DatasetManifest, ModelInfo, SplitStats
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.run import DsConfig
from zerogate.contracts.summary import SpikeRule
from zerogate.contracts.verdicts import FAIL, PASS
from zerogate.errors import InputError
from zerogate.provenance import RunIdentity, RunRecords, provenance
from zerogate.report.figures import loss_figure, memory_figure, step_time_figure
from zerogate.report.registry import registry_record
from zerogate.robust import MAD_TO_SIGMA

STEPS, WARMUP, SKIPPED, SPIKE = 30, 3, 8, 20
# The spike rule as the rules pass it: the stabiliser section with its defaults filled in
# (train/settings.json).
STABILISER = stabiliser_settings({"spike_window": 16, "spike_min_history": 5})
RULE = SpikeRule.from_settings(STABILISER)
PROFILE = settings("cpu-tiny")
CLAIM_BOX = claim_box()


# ---- the run's real inputs, built by their producers ----------------------------------------------------


def uneven_run() -> pd.DataFrame:
    """2 ranks, fp16: rank 0 is slow on every third step, rank 1 on the step after, so each rank's median
    is fast (1.0 s, 1.1 s) while two steps in three have a slow rank (max per step, median: ~3 s)."""
    records = []
    for rank in (0, 1):
        for step in range(1, STEPS + 1):
            slow = step % 3 == rank
            time = (3.0 if slow else 1.0) + 0.1 * rank + 0.001 * step
            skipped = step == SKIPPED
            t = 0.05 if skipped else time
            records.append(
                step_record(
                    step=step,
                    rank=rank,
                    loss=5.0 - 0.05 * step + (4.0 if step == SPIKE else 0.0) + 0.01 * math.sin(step),
                    grad_norm=None if skipped else 1.0,
                    step_time_s=t,
                    micro_step_time_s=t / 4,
                    tokens=256,
                    tokens_per_s=256 / t,
                    device_peak_gib=(0.5 if step == 2 else 0.4) if rank == 0 else 0.7,
                    update_applied=not skipped and step != SPIKE,
                    skip_reason="fp16_overflow" if skipped else ("loss_spike" if step == SPIKE else None),
                    loss_scale=32768.0 if step >= SKIPPED else 65536.0,
                )
            )
    return table_of(records)


def judged(steps, events=None, summary=None, log=""):
    events = no_events() if events is None else events
    summary = train_summary(STEPS, dtype="fp16") if summary is None else summary
    meta = run_metadata(steps, events, summary, log, STEPS)
    meta = RunMeta.parse(json.loads(json.dumps(meta.as_json())), "parsed/run.json")  # as run.json holds it
    ds_config, deviations, _ = rendered_run("claim box")
    verdicts = judged_run(
        PROFILE.gates,
        steps,
        events,
        summary,
        run_spec_for(STEPS),
        deviations,
        CPU_FINGERPRINT,
        WARMUP,
        RULE,
        plan=with_optimizer_step_floor(planned_run(), 0.1),
        run_meta=meta,
        ds_config=ds_config,
    )
    return {g.name: g for g in verdicts.gates}, verdicts, meta


def registry(tmp_path, machine, steps, verdicts, meta):
    """The run's registry as register_run writes it (its provenance as record_provenance writes it), read
    back as compare reads it."""
    run_dir = tmp_path / "results" / "smoke" / machine
    (run_dir / "parsed").mkdir(parents=True)
    steps.to_parquet(run_dir / "parsed/steps.parquet")
    ds_config, deviations, spec = rendered_run("claim box")
    manifest = DatasetManifest(
        source="builtin-tasks",
        content_sha256="d" * 64,
        seq_len=spec.seq_len,
        splits={
            "train": SplitStats(rows=100, dropped_too_long=0, truncated=0, tokens=6400, loss_tokens=3200)
        },
        template="builtin",
        tokenizer_directory="dataset/tokenizer",
        vocab_size=256,
        pad_token_id=0,
        eos_token_id=1,
        model=ModelInfo(source="shape", kind="shape", directory=None),
    )
    recorded = provenance(
        RunIdentity(
            profile_name="smoke",
            profile={"training": {"optimizer_steps": STEPS}},
            config_hash="f" * 64,
            run_id=f"smoke-{machine}-ffffffff",
        ),
        RunRecords(
            fingerprint=CPU_FINGERPRINT,
            manifest=manifest,
            ds_config=ds_config.raw,
            summary=train_summary(STEPS, dtype="fp16"),
        ),
        repo=tmp_path,
    )
    within = f"results/smoke/{machine}"
    summary = summarised(steps, WARMUP, RULE, run_meta=meta)
    summary.write(run_dir / "summary/run.json")
    run = RunEvidence(
        run_summary=summary, verdicts=verdicts, run_meta=meta, provenance=recorded, deviations=deviations
    )
    record = registry_record(
        machine,
        run,
        {
            "steps": f"{within}/parsed/steps.parquet",
            "report": f"{within}/report.html",
            "verdicts": f"{within}/gates/verdicts.json",
            "events": f"{within}/parsed/events.parquet",
            "provenance": f"{within}/provenance.json",
            "figures": {},
        },
    )
    record.write(run_dir / "registry.json")
    return load_run(run_dir)


def test_the_synthetic_run_separates_the_old_definitions():
    steps = uneven_run()
    timed = steps[(steps["step"] > WARMUP) & (steps["step"] != SKIPPED)]
    max_then_median = timed.groupby("step")[STEP_TIME].max().median()
    median_then_max = timed.groupby("rank")[STEP_TIME].median().max()
    assert max_then_median > 2.5 and median_then_max < 1.2
    assert measures.step_time(steps, WARMUP).value == pytest.approx(median_then_max)
    assert measures.overflow_skips(steps).worst_count == 1
    assert loss_spikes(steps, RULE).steps == [SPIKE]


def test_every_consumer_gives_the_same_number(tmp_path):
    steps = uneven_run()
    gates, verdicts, meta = judged(steps)
    summary = summarise_run(steps, WARMUP, RULE, meta)  # the report's run summary
    runs = [registry(tmp_path, machine, steps, verdicts, meta) for machine in ("lab-a", "lab-b")]
    stored = runs[0].registry.summary  # after the JSON round trip
    comparison = group_runs(runs)
    assert len(comparison.groups) == 1 and not comparison.stragglers
    rows = {row["label"]: row["cells"]["lab-b"]["value"] for row in quantity_rows(comparison.groups[0])}
    table = comparison_table(comparison)
    csv = table[table["machine"] == "lab-b"].set_index("statistic")[
        "value"
    ]  # the long CSV: one row per statistic
    (variant,) = variants_table(
        {"zero3": Trained(steps, train_summary(STEPS, dtype="fp16"))},
        warmup_steps=WARMUP,
        spike_rule=RULE,
        expected_steps=STEPS,
    ).rows
    statistics = variant.statistics
    run_summary = summarised(steps, WARMUP, RULE, run_meta=meta)  # what plot_figures reads
    drawn = loss_figure(steps, no_events(), run_summary, tmp_path / "loss.png")
    drawn |= step_time_figure(steps, run_summary, verdicts, tmp_path / "step.png")
    drawn |= memory_figure(steps, run_summary, verdicts, tmp_path / "memory.png")

    median = measures.step_time(steps, WARMUP).value
    for value in (
        gates["optimizer_step_time"].measured,
        max(gates["optimizer_step_time"].evidence.per_rank.values()),
        gates["step_time_over_physical_floor"].evidence.median_step_time,
        summary.step_time_median_s,
        stored.step_time_median_s,
        rows["median optimizer-step time, slowest rank"],
        csv["median optimizer-step time, slowest rank"],
        statistics.step_time_median_s,
        drawn["step_time_median(s)"],
    ):
        assert value == median
    p90 = measures.step_time(steps, WARMUP, "p90").value
    for value in (
        gates["optimizer_step_time_p90"].measured,
        gates["optimizer_step_time"].evidence.p90,
        summary.step_time_p90_s,
        stored.step_time_p90_s,
        rows["p90 optimizer-step time, slowest rank"],
        statistics.step_time_p90_s,
    ):
        assert value == p90
    micro = measures.micro_step_time(steps, WARMUP).value
    for value in (
        gates["micro_step_time"].measured,
        summary.micro_step_time_median_s,
        stored.micro_step_time_median_s,
        rows["median micro-step time, slowest rank"],
        statistics.micro_step_time_median_s,
    ):
        assert value == micro
    tokens = measures.tokens_per_second(steps, WARMUP)
    for value in (
        summary.tokens_per_s,
        stored.tokens_per_s,
        rows["tokens/s, all ranks"],
        csv["tokens/s, all ranks"],
        statistics.tokens_per_s,
    ):
        assert value == tokens
    peaks = measures.peak_memory_per_rank(steps)
    assert peaks == {0: 0.5, 1: 0.7}  # rank 0's peak is in the warm-up: memory counts every step
    for value in (
        gates["peak_memory_per_rank"].evidence.per_rank,
        summary.peak_memory_per_rank_gib,
        stored.peak_memory_per_rank_gib,
        {0: rows["peak memory, rank 0"], 1: rows["peak memory, rank 1"]},
        {0: csv["peak memory, rank 0"], 1: csv["peak memory, rank 1"]},
        statistics.peak_memory_per_rank_gib,
        drawn["peak_memory_per_rank(GiB)"],
    ):
        assert value == peaks
    skipped = measures.overflow_skips(steps).worst_count
    assert skipped == 1
    for value in (
        max(gates["overflow_skip_fraction"].evidence.skipped_per_rank.values()),
        summary.overflow_skipped_steps,
        stored.overflow_skipped_steps,
        rows["fp16-overflow-skipped steps, worst rank"],
        statistics.overflow_skipped_steps,
    ):
        assert value == skipped
    assert gates["optimizer_step_time"].evidence.overflow_skipped_steps_excluded == 1  # after the warm-up
    spikes = loss_spikes(steps, RULE)
    for value in (
        gates["loss_convergence"].evidence.spikes,
        summary.loss_spikes,
        stored.loss_spikes,
        rows["loss spikes"],
        statistics.loss_spikes,
        drawn["loss_spikes"],
    ):
        assert value == spikes.count == 1
    assert gates["loss_convergence"].evidence.spike_steps == drawn["spike_steps"] == spikes.steps
    # Completion: one definition behind both gates, the summary, the registry and the variant table.
    assert gates["ranks_completed"].verdict == PASS and gates["ranks_completed"].measured == 0
    assert gates["zero_nonfinite"].evidence.run_complete is True
    for value in (summary.run_complete, stored.run_complete, statistics.run_complete):
        assert value is True
    for value in (summary.failed_ranks, stored.failed_ranks, rows["failed ranks"], statistics.failed_ranks):
        assert value == 0


def test_a_crashed_rank_fails_both_gates_through_the_one_completion():
    log = (
        '[rank1]: Traceback (most recent call last):\n[rank1]:   File "loop.py", line 9, in step\n'
        "[rank1]: RuntimeError: boom\n"
    )
    steps = uneven_run()
    steps = steps[~((steps["rank"] == 1) & (steps["step"] > 20))]
    gates, _, meta = judged(steps, parse_launcher_log(log), summary=train_summary(20, dtype="fp16"), log=log)
    completion = completion_of(meta)
    assert completion.failed_ranks == [1] and completion.stopped_early == {1: 20} and not completion.complete
    for name in ("ranks_completed", "zero_nonfinite"):
        assert gates[name].verdict == FAIL
        assert all(problem in gates[name].reason for problem in completion.problems), name
    assert gates["ranks_completed"].measured == 1 and gates["zero_nonfinite"].measured == 0
    assert summary_of(steps, meta).failed_ranks == 1 and summary_of(steps, meta).run_complete is False


def summary_of(steps, meta):
    return summarise_run(steps, WARMUP, RULE, meta)


def test_a_run_that_stopped_without_a_word_counts_one_unknown_rank():
    completion = run_completion({0: 30, 1: 30}, [], False, 30, 2)
    assert completion.failed_rank_count == 1 and completion.problems == [
        "the training run did not finish (no summary)"
    ]
    missing = run_completion({0: 30}, [], True, 30, 2)  # rank 1 wrote no record at all
    assert missing.stopped_early == {1: 0} and missing.failed_ranks == [1]


def test_the_spike_rule_is_the_stabilisers():
    """loss_spikes replays zerogate.train.stabiliser on the recorded series: same steps flagged."""
    from zerogate.train.stabiliser import Stabiliser

    rng = np.random.default_rng(3)
    loss = 4.0 - np.linspace(0, 1, 300) + rng.normal(0, 0.02, 300)
    loss[[60, 61, 150, 280]] += [1.0, 3.0, 0.5, 2.0]
    loss[100] = np.nan
    section = stabiliser_settings({"spike_window": 64, "spike_threshold": 6.0, "spike_min_history": 20})
    stabiliser, flagged, applied = Stabiliser(section), [], []
    for step, value in enumerate(loss, start=1):
        verdict = stabiliser.judge_loss([float(value)])
        if verdict.ok:
            stabiliser.accept(float(value))
        elif verdict.kind == "loss_spike":
            flagged.append(step)
        applied.append(verdict.ok)
    steps = table_of(
        [
            step_record(step=step, loss=float(value), update_applied=ok)
            for step, (value, ok) in enumerate(zip(loss, applied), start=1)
        ]
    )
    rule = SpikeRule.from_settings(section)
    assert flagged and loss_spikes(steps, rule).steps == flagged
    # The profile's threshold is the gates' threshold: a higher one counts fewer spikes.
    strict = SpikeRule.from_settings(section.model_copy(update={"spike_threshold": 40.0}))
    assert loss_spikes(steps, strict).count < len(flagged)


def test_the_gates_read_the_profiles_spike_settings():
    steps = uneven_run()
    loose = SpikeRule.from_settings(STABILISER.model_copy(update={"spike_threshold": 1000.0}))
    verdicts = judged_run(
        PROFILE.gates,
        steps,
        no_events(),
        train_summary(STEPS, dtype="fp16"),
        run_spec_for(STEPS),
        rendered_run("claim box")[1],
        CPU_FINGERPRINT,
        WARMUP,
        loose,
    )
    convergence = verdicts.gate("loss_convergence")
    assert convergence.evidence.spikes == 0 and "1000" in convergence.evidence.spike_rule
    assert (
        judged_run(
            PROFILE.gates,
            steps,
            no_events(),
            train_summary(STEPS, dtype="fp16"),
            run_spec_for(STEPS),
            rendered_run("claim box")[1],
            CPU_FINGERPRINT,
            WARMUP,
            RULE,
        )
        .gate("loss_convergence")
        .evidence.spikes
        == 1
    )


def test_without_a_loss_scaler_skips_are_not_measured_never_zero():
    steps = uneven_run().assign(loss_scale=None)
    assert measures.overflow_skipped(steps) is None and measures.overflow_skips(steps) is None
    assert run_statistics(steps, WARMUP, RULE).overflow_skipped_steps is None
    # Without a loss scaler nothing was skipped by fp16: the timed steps keep the (fast) step 8.
    assert SKIPPED in set(measures.timed_steps(steps, WARMUP)["step"])


def test_analysis_and_report_never_load_torch():
    modules = [
        "zerogate.analysis.measures",
        "zerogate.analysis.gates",
        "zerogate.analysis.variants",
        "zerogate.analysis.ledger_check",
        "zerogate.report.html",
        "zerogate.report.compare",
        "zerogate.report.figures",
        "zerogate.report.registry",
    ]
    probe = (
        f"import sys\nfor m in {modules!r}: __import__(m)\nprint('torch' in sys.modules, 'deepspeed' in "
        "sys.modules)"
    )
    workflow = str(Path(__file__).resolve().parents[2] / "workflow")
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": workflow, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]


def test_a_run_no_longer_than_its_warmup_has_no_timing_statistics():
    statistics = run_statistics(uneven_run(), STEPS, RULE)
    assert statistics.timed_steps == 0 and statistics.step_time_median_s is None
    assert statistics.tokens_per_s is None and statistics.peak_memory_per_rank_gib == {0: 0.5, 1: 0.7}


def test_statistics_are_nan_over_any_gap_and_exact_otherwise():
    series = pd.Series([3.0, 1.0, 2.0, 10.0, 4.0])
    assert measures.median_of(series) == 3.0
    assert measures.p90_of(series) == pytest.approx(np.quantile([1, 2, 3, 4, 10], 0.9)) == pytest.approx(7.6)
    assert measures.max_of(series) == 10.0
    for gap in (np.nan, np.inf, -np.inf, None):
        holed = pd.Series([3.0, 1.0, gap, 10.0], dtype=object)
        assert all(math.isnan(f(holed)) for f in (measures.median_of, measures.p90_of, measures.max_of))
    assert math.isnan(measures.max_of(pd.Series([], dtype=float)))
    assert measures.STATISTICS == {
        "median": measures.median_of,
        "p90": measures.p90_of,
        "max": measures.max_of,
    }


def test_slowest_rank_names_the_rank_with_a_gap():
    frame = table_of(
        [
            step_record(rank=rank, step=step, step_time_s=t)
            for rank, step, t in [
                (0, 1, 1.0),
                (0, 2, 2.0),
                (1, 1, 9.0),
                (1, 2, 1.0),
                (2, 1, 5.0),
                (2, 2, 6.0),
            ]
        ]
    )
    frame.loc[(frame["rank"] == 1) & (frame["step"] == 1), STEP_TIME] = np.nan
    result = measures.slowest_rank(frame, STEP_TIME, "max")
    assert math.isnan(result.value) and result.rank == 1
    clean = measures.slowest_rank(frame[frame["rank"] != 1], STEP_TIME, "median")
    assert clean.value == 5.5 and clean.rank == 2 and clean.per_rank == {0: 1.5, 2: 5.5}


def test_smooth_is_a_centred_rolling_median_of_about_5_percent():
    for n in (40, 100, 400):
        values = np.r_[np.zeros(n // 2), np.full(n - n // 2, 10.0)] + np.arange(n) * 1e-3
        window = max(5, n // 20) | 1
        half = window // 2
        expected = [np.median(values[max(0, i - half) : i + half + 1]) for i in range(n)]
        assert measures.smooth(pd.Series(values)).tolist() == pytest.approx(expected)


def test_step_time_per_step_is_the_slowest_rank_at_each_step():
    frame = table_of(
        [
            step_record(rank=rank, step=step, step_time_s=t)
            for rank, step, t in [(0, 1, 1.0), (1, 1, 3.0), (0, 2, 4.0), (1, 2, 2.0)]
        ]
    )
    assert measures.step_time_per_step(frame).to_dict() == {1: 3.0, 2: 4.0}


def test_tokens_per_second_sums_ranks_then_takes_the_median_and_never_skips_a_gap():
    frame = table_of(
        [
            step_record(rank=rank, step=step, tokens_per_s=v)
            for rank, step, v in [
                (0, 1, 1.0),
                (1, 1, 2.0),
                (0, 2, 3.0),
                (1, 2, 4.0),
                (0, 3, 5.0),
                (1, 3, 6.0),
            ]
        ]
    )
    assert measures.tokens_per_second(frame, 0) == 7.0
    assert measures.tokens_per_second(frame, 1) == 9.0  # the warm-up step is left out
    frame.loc[(frame["rank"] == 1) & (frame["step"] == 3), TOKENS_PER_S] = np.nan
    assert math.isnan(measures.tokens_per_second(frame, 0))


def test_record_completeness_names_missing_repeated_unexpected_and_extra():
    frame = table_of(
        [step_record(rank=rank, step=step) for rank, step in [(0, 1), (0, 2), (0, 2), (0, 4), (2, 1), (5, 1)]]
    )
    found = record_completeness(frame, 3, 3)
    assert found.missing_ranks == [1] and found.extra_ranks == [5] and found.ranks_present == [0, 2, 5]
    assert found.missing_steps == {0: [3], 2: [2, 3], 5: [2, 3]}
    assert found.repeated_steps == {0: [2]} and found.unexpected_steps == {0: [4]}
    assert found.incomplete_ranks == [0, 1, 2, 5] and not found.complete
    text = "; ".join(found.problems)
    for part in (
        "ranks with no step records: [1] of world size 3",
        "outside the world size 3: [5]",
        "rank 0: 1 steps missing (3)",
        "rank 0: 1 steps recorded more than once (2)",
        "rank 0: 1 steps outside 1..expected (4)",
    ):
        assert part in text
    evidence = found.evidence()
    assert evidence.world_size == 3 and evidence.expected_steps == 3
    assert evidence.missing_steps == {0: "3", 2: "2, 3", 5: "2, 3"}
    assert evidence.steps_per_rank == {0: 3, 2: 1, 5: 1}  # distinct steps recorded
    file_form = evidence.model_dump(by_alias=True)
    assert file_form["world_size(ranks)"] == 3 and file_form["expected_steps(steps)"] == 3
    assert file_form["missing_steps(step)"] == {0: "3", 2: "2, 3", 5: "2, 3"}
    unknown = record_completeness(frame, None, None)
    assert unknown.problems == [
        "world size unknown (no run spec or summary gives it): the ranks cannot be counted",
        "expected optimizer steps unknown: the steps cannot be counted",
        "rank 0: 1 steps recorded more than once (2)",
    ]
    complete = record_completeness(
        table_of([step_record(rank=r, step=s) for r in (0, 1) for s in (1, 2)]), 2, 2
    )
    assert complete.complete and complete.problems == [] and complete.incomplete_ranks == []
    assert step_span(list(range(1, 12))) == "1, 2, 3, 4, 5, 6, 7, 8 and 3 more"


def test_missing_values_per_rank():
    frame = table_of(
        [
            step_record(rank=rank, step=step, tokens_per_s=v)
            for rank, step, v in [(0, 1, 1.0), (0, 2, None), (1, 1, np.inf), (1, 2, 2.0)]
        ]
    )
    assert missing_values(frame, TOKENS_PER_S) == {0: [2], 1: [1]}
    assert missing_values(frame.assign(**{TOKENS_PER_S: 1.0}), TOKENS_PER_S) == {}


def test_loss_scaler_comes_from_the_rendered_config():
    # The rendered DeepSpeed config says whether fp16's dynamic loss scaler runs (DsConfig.loss_scaler).
    assert rendered_run("claim box")[0].loss_scaler and rendered_run("claim box")[0].dtype == "fp16"
    assert not rendered_run("cpu")[0].loss_scaler  # the CPU trains in fp32
    bf16 = rendered_run("claim box", overrides=(("fp16.enabled", False), ("bf16.enabled", True)))[0]
    assert bf16.dtype == "bf16" and not bf16.loss_scaler
    # Rendered configs are concrete: an "auto" precision is refused when rendering, and is no loss scaler.
    with pytest.raises(InputError, match='still "auto"'):
        rendered_run("claim box", overrides=(("fp16.enabled", "auto"),))
    auto = DsConfig.of(
        {**rendered_run("claim box")[0].raw, "fp16": {"enabled": "auto"}}, "an unrendered config"
    )
    assert not auto.loss_scaler


def test_nonfinite_events_one_per_step_with_ranks_metrics_and_sources():
    nan, inf = float("nan"), float("inf")
    frame = table_of(
        [
            step_record(rank=rank, step=step, loss=loss, grad_norm=grad_norm)
            for rank, step, loss, grad_norm in [
                (0, 1, nan, 1.0),
                (1, 1, nan, inf),
                (0, 2, 1.0, None),
                (1, 2, 1.0, 1.0),
                (0, 3, nan, 1.0),
                (1, 3, 1.0, 1.0),
            ]
        ]
    )
    events = nonfinite_events(
        frame, ["loss", "grad_norm", "absent"], [(2, 1, "nonfinite_grad_norm"), (9, None, "nonfinite_loss")]
    )
    assert [e.evidence().model_dump(by_alias=True) for e in events] == [
        {
            "step(step)": 1,
            "ranks(rank)": [0, 1],
            "metrics": ["grad_norm", "loss"],
            "sources": ["step records"],
        },
        {"step(step)": 2, "ranks(rank)": [1], "metrics": ["grad_norm"], "sources": ["loss stabiliser"]},
        {"step(step)": 3, "ranks(rank)": [0], "metrics": ["loss"], "sources": ["step records"]},
        {"step(step)": 9, "ranks(rank)": [], "metrics": ["loss"], "sources": ["loss stabiliser"]},
    ]  # a null grad_norm (DeepSpeed returned none) is no fault; a non-finite loss is


RULE_10 = ConvergenceRule(initial_steps=3, final_fraction=0.1, max_rebound=0.25, min_drop_sigmas=3.0)


def convergence_of(losses):
    return loss_convergence(
        table_of([step_record(step=step, loss=loss) for step, loss in enumerate(losses, start=1)]), RULE_10
    )


def test_loss_convergence_figures_by_hand():
    losses = [5.0, 4.0, 6.0] + [2.0] * 7 + [3.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 0.5]
    found = convergence_of(losses)  # 20 steps: blocks of 2 from the end
    assert found.steps == 20 and found.nonfinite_steps == []
    assert found.initial == 5.0 and found.final == 1.0 and found.lowest_block == 1.0
    assert found.final_spread == pytest.approx(0.5 * MAD_TO_SIGMA)
    assert found.ratio == 0.2 and found.rebound == 0.0
    assert found.drop_sigmas == pytest.approx(4.0 / (0.5 * MAD_TO_SIGMA))
    assert found.problems(RULE_10) == []


def test_loss_convergence_rebound_flat_and_nonfinite():
    u = convergence_of([3.0] * 3 + [1.0] * 15 + [2.0, 2.0])
    assert u.lowest_block == 1.0 and u.final == 2.0 and u.rebound == pytest.approx(0.5)
    assert any("back up 0.5 of the drop" in p for p in u.problems(RULE_10))
    flat = convergence_of([2.0] * 20)
    assert flat.rebound == 0.0 and flat.drop_sigmas == 0.0 and flat.ratio == 1.0
    assert any("not >= 3" in p for p in flat.problems(RULE_10))
    cliff = convergence_of(
        [3.0] * 10 + [1.0] * 10
    )  # no spread in the last block, a real drop: infinitely many sigmas
    assert cliff.drop_sigmas == math.inf and cliff.problems(RULE_10) == []
    risen = convergence_of([1.0] * 10 + [3.0] * 10)
    assert risen.rebound == math.inf and risen.drop_sigmas == 0.0
    broken = convergence_of([3.0] * 5 + [math.inf, math.nan] + [1.0] * 13)
    assert broken.nonfinite_steps == [6, 7] and math.isnan(broken.ratio)
    assert broken.problems(RULE_10) == ["non-finite loss at 2 steps (6, 7)"]
    assert loss_convergence(table_of([]), RULE_10).steps == 0
    # The rule is the gate's convergence block: cpu-tiny's loss_convergence gate states exactly RULE_10.
    gate = next(g for g in PROFILE.gates if g.statistic == "loss_convergence")
    assert ConvergenceRule.from_gate(gate) == RULE_10
    other = gate.model_copy(
        update={
            "convergence": ConvergenceRuleSettings(
                initial_steps=5, final_fraction=0.2, max_rebound=0.1, min_drop_sigmas=2
            )
        }
    )
    assert ConvergenceRule.from_gate(other) == ConvergenceRule(5, 0.2, 0.1, 2.0)
    with pytest.raises(ValueError, match="needs its convergence block"):
        ConvergenceRule.from_gate(gate.model_copy(update={"convergence": None}))


def test_run_statistics_keys_and_values():
    def frame(collectives=None):
        """2 ranks, 4 steps; rank 0 takes 1 s a step after the warm-up, rank 1 2 s; ``collectives``: per rank,
        the seconds in collectives at each step (None: the clock was off)."""
        return table_of(
            [
                step_record(
                    rank=rank,
                    step=step,
                    loss=5.0 - step,
                    step_time_s=time,
                    micro_step_time_s=1.0,
                    tokens_per_s=10.0,
                    device_peak_gib=0.5,
                    collectives_s=None if collectives is None else collectives[rank][step - 1],
                )
                for rank, times in ((0, [9.0, 1.0, 1.0, 1.0]), (1, [9.0, 2.0, 2.0, 2.0]))
                for step, time in enumerate(times, start=1)
            ]
        )

    stats = run_statistics(frame(), 1, RULE)
    assert stats.model_dump(by_alias=True) == {
        "ranks": 2,
        "optimizer_steps": 4,
        "warmup_steps_excluded": 1,
        "timed_steps": 3,
        "step_time_median(s)": 2.0,
        "step_time_p90(s)": 2.0,
        "slowest_rank": 1,
        "micro_step_time_median(s)": 1.0,
        "tokens_per_s": 20.0,
        "first_loss": 4.0,
        "final_loss": 1.0,
        "loss_spikes": 0,
        "overflow_skipped_steps": None,
        "peak_memory_per_rank(GiB)": {0: 0.5, 1: 0.5},
        "run_complete": None,
        "failed_ranks": None,
        # no collectives(s) in these records: who waits for whom is not measured
        "straggler_rank": None,
        "straggler_compute_excess(s)": None,
        "wait_for_straggler_median(s)": None,
        "intervals": None,
        "repeats(runs)": 1,  # no interval asked for (and 3 timed steps are too few for one)
    }
    timed = frame(collectives={0: [5.0, 0.9, 0.9, 0.9], 1: [5.0, 0.2, 0.2, 0.2]})
    straggling = {
        k: v for k, v in run_statistics(timed, 1, RULE).model_dump(by_alias=True).items() if "straggler" in k
    }
    assert straggling == {
        "straggler_rank": 1,
        "straggler_compute_excess(s)": pytest.approx(1.7),
        "wait_for_straggler_median(s)": pytest.approx(0.7),
    }
    bare = run_statistics(frame().assign(**{STEP_TIME: np.nan}), 1, RULE)  # no step time recorded
    assert bare.step_time_median_s is None and bare.step_time_p90_s is None and bare.slowest_rank is None
