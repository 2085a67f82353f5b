"""Profile key `repeats`: a copy of the shared smoke run, given `repeats: 2`, trains one more complete run
(seed + 1, the same data) beside it without retraining the first, and its gates, report and registry pool the
two."""

from __future__ import annotations

import pytest

from tests.integration.pipeline import snakemake
from zerogate.analysis.parse import read_steps
from zerogate.contracts.report import RunRegistry
from zerogate.contracts.run import RunSpec
from zerogate.contracts.verdicts import GateVerdicts

pytestmark = pytest.mark.integration


def test_a_second_repeat_trains_beside_the_run_and_the_timings_pool_both(smoke_run, tmp_path):
    workdir, results = smoke_run.copy(tmp_path / "run")
    trained_at = (results / "train/summary.json").stat().st_mtime_ns
    profile = workdir / "config/profiles/smoke.yaml"
    profile.write_text(profile.read_text() + "repeats: 2\n")
    done = snakemake(workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (results / "train/summary.json").stat().st_mtime_ns == trained_at  # repeat 0 is the run itself
    assert "rule train_repeat:" in done.stderr or "localrule train_repeat:" in done.stderr
    first, second = (
        RunSpec.read(results / "deepspeed/run_spec.json"),
        RunSpec.read(results / "repeats/1/deepspeed/run_spec.json"),
    )
    assert second.training.seed == first.training.seed + 1
    assert second.model_dump(exclude={"training"}) == first.model_dump(exclude={"training"})
    repeat = read_steps(results / "repeats/1/parsed/steps.parquet")
    assert (
        sorted(repeat["rank"].unique()) == [0, 1] and repeat["step"].max() == first.training.optimizer_steps
    )

    registry = RunRegistry.read(results / "registry.json")
    assert registry.summary.repeats == 2 and len(registry.repeats) == 2
    assert registry.summary.intervals.repeats == 2 and "run-to-run" in registry.summary.intervals.covers
    medians = [stats.step_time_median_s for stats in registry.repeats]
    assert registry.summary.step_time_median_s == pytest.approx(sum(medians) / 2)  # two: their mean
    assert registry.files.repeat_steps and registry.files.repeat_steps[0].endswith(
        "repeats/1/parsed/steps.parquet"
    )
    for stats in registry.repeats:  # memory measured per repeat
        assert set(stats.peak_memory_per_rank_gib) == {0, 1}
    step_gate = GateVerdicts.read(results / "gates/verdicts.json").gate("optimizer_step_time")
    assert step_gate.interval.repeats == 2 and step_gate.evidence.per_repeat == pytest.approx(medians)
    reports = sorted((results / "report").glob("zerogate-v*.html"), key=lambda p: p.stat().st_mtime)
    page = reports[-1].read_text()
    table = page[page.index("<table id='repeats'>") :]
    assert table[: table.index("</table>")].count("<tr>") == 1 + 2
    print(
        "repeats of the smoke run, median optimizer step (s):",
        medians,
        "pooled",
        registry.summary.step_time_median_s,
        registry.summary.intervals.step_time_median_s,
    )
