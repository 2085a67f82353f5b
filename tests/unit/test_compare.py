"""compare: runs grouped by what they measured, machines side by side with ratios to a reference, and the
runs that are not comparable listed apart with their one reason."""

import json
import re

import pytest

from tests.unit.helpers import no_events, settings, spike_rule, summarised, synthetic_steps, train_summary
from tests.unit.test_report import DEVIATION, provenance, verdicts_of
from zerogate.analysis import measures
from zerogate.analysis.compare import (
    gate_rows,
    group_runs,
    histories,
    history_rows,
    load_run,
    noise_summary,
    quantity_rows,
)
from zerogate.analysis.compare_table import comparison_table
from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.parse import read_steps, run_metadata
from zerogate.contracts.records import GitState
from zerogate.contracts.report import GitAtStages, RunRegistry
from zerogate.contracts.run import Deviations
from zerogate.contracts.summary import IntervalRule
from zerogate.errors import InputError
from zerogate.provenance import measurement_hash
from zerogate.report.compare import history_figure, overlay_figure, render_comparison
from zerogate.report.registry import registry_record


def registry_of(
    tiny_profile,
    machine,
    dataset_hash="d" * 64,
    step_time=0.5,
    profile="smoke",
    config_hash="f" * 64,
    memory_gib=0.6,
    steps=None,
    interval_rule=None,
    commit="abc123",
    recorded_at=None,
    resolved=None,
):
    """(registry.json's record, the steps table, the run summary) of a synthetic run (or of ``steps``), as
    summarise_run and register_run make them."""
    steps = synthetic_steps(step_time=step_time, memory_gib=memory_gib) if steps is None else steps
    verdicts = verdicts_of(tiny_profile, steps)
    base = f"results/{profile}/{machine}"
    made = provenance(
        profile=profile,
        run_id=f"{profile}-{machine}-{config_hash[:8]}",
        config_hash=config_hash,
        dataset_hash=dataset_hash,
        resolved_profile=resolved,
        measurement_hash=None if resolved is None else measurement_hash(resolved),
    )
    git = GitState(commit=commit, dirty=False)
    made = made.model_copy(
        update={
            "git": GitAtStages(at_training=git, at_report=git),
            "recorded_at": recorded_at or made.recorded_at,
        }
    )
    meta = run_metadata(steps, no_events(), train_summary(), "", 200)
    summary = summarised(steps, 5, spike_rule(tiny_profile), run_meta=meta, interval_rule=interval_rule)
    run = RunEvidence(
        run_summary=summary,
        verdicts=verdicts,
        run_meta=meta,
        provenance=made,
        deviations=Deviations(deviations=[DEVIATION]),
    )
    record = registry_record(
        machine,
        run,
        {
            "report": f"{base}/report/x.html",
            "verdicts": f"{base}/gates/verdicts.json",
            "steps": f"{base}/parsed/steps.parquet",
            "events": f"{base}/parsed/events.parquet",
            "provenance": f"{base}/provenance.json",
            "figures": {
                name: f"{base}/figures/{name}.png" for name in ("loss", "step_time", "memory", "loss_scale")
            },
        },
    )
    return record, steps, summary


def write_run(root, tiny_profile, machine, registry=RunRegistry, **run):
    """A run directory as the pipeline leaves it: registry.json (written as ``registry``, the contract of
    this or an older version) plus parsed/steps.parquet and summary/run.json."""
    record, steps, summary = registry_of(tiny_profile, machine, **run)
    run_dir = root / "results" / record.profile / machine
    (run_dir / "parsed").mkdir(parents=True)
    steps.to_parquet(run_dir / "parsed/steps.parquet")
    summary.write(run_dir / "summary/run.json")
    registry.model_validate(record.model_dump()).write(run_dir / "registry.json")
    return run_dir


class OlderRegistry(RunRegistry):
    """A registry an older pipeline wrote: the same fields, an older contract version."""

    VERSION = RunRegistry.VERSION - 1


@pytest.fixture
def seven(tmp_path, tiny_profile):
    """Two groups (smoke on lab-a and lab-b; cpu-tiny on box-1 and box-2) and three runs that fit neither."""
    dirs = [
        write_run(tmp_path, tiny_profile, "lab-b", step_time=2.5, memory_gib=1.2),
        write_run(tmp_path, tiny_profile, "lab-a", step_time=0.5),
        write_run(tmp_path, tiny_profile, "box-2", profile="cpu-tiny", config_hash="c" * 64, step_time=1.0),
        write_run(tmp_path, tiny_profile, "box-1", profile="cpu-tiny", config_hash="c" * 64, step_time=0.8),
        write_run(tmp_path, tiny_profile, "lab-x", dataset_hash="e" * 64),  # smoke, another dataset
        write_run(
            tmp_path, tiny_profile, "box-3", profile="cpu-tiny", config_hash="9" * 64
        ),  # edited profile
        write_run(
            tmp_path, tiny_profile, "lab-a", profile="gpu-1x", config_hash="a" * 64
        ),  # alone in its profile
    ]
    return [load_run(d) for d in dirs]


def test_registry_holds_gates_summary_and_provenance(tmp_path, tiny_profile):
    run_dir = write_run(tmp_path, tiny_profile, "lab-a")
    assert json.loads((run_dir / "registry.json").read_text())["contract"] == RunRegistry.stamp()
    run = load_run(run_dir)
    record = run.registry
    assert run.problem is None and record.machine == "lab-a" and run.machine == "lab-a"
    assert [g.name for g in record.gates] == [g.name for g in settings(tiny_profile).gates]
    assert record.provenance.dataset_sha256 == "d" * 64 and len(record.provenance.ds_config_sha256) == 64
    assert record.summary.ranks == 2 and record.summary.run_complete is True


def test_runs_are_grouped_by_profile_config_and_dataset(seven):
    comparison = group_runs(seven)
    assert [(g.key[0], g.machines) for g in comparison.groups] == [
        ("smoke", ["lab-a", "lab-b"]),
        ("cpu-tiny", ["box-1", "box-2"]),
    ]
    assert [g.reference for g in comparison.groups] == ["lab-a", "box-1"]  # first alphabetically
    reasons = {s.run.run_id: s.reason for s in comparison.stragglers}
    assert len(reasons) == 3
    assert reasons["smoke-lab-x-ffffffff"].startswith("dataset hash eeeeeeeeeeee differs")
    assert reasons["cpu-tiny-box-3-99999999"].startswith("measurement hash 999999999999 differs")
    assert reasons["gpu-1x-lab-a-aaaaaaaa"] == "the only run of profile gpu-1x"
    assert all(";" not in reason for reason in reasons.values())  # one reason each


def test_the_user_chooses_the_reference_machine(seven):
    comparison = group_runs(seven, reference="lab-b")
    smoke, tiny = comparison.groups
    assert smoke.reference == "lab-b" and smoke.reference_note is None
    assert tiny.reference == "box-1" and "lab-b" in tiny.reference_note
    step = next(row for row in quantity_rows(smoke) if row["label"].startswith("median optimizer-step"))
    assert step["cells"]["lab-b"]["ratio"] == 1.0
    lab_a, lab_b = seven[1].statistic("step_time_median_s"), seven[0].statistic("step_time_median_s")
    assert step["cells"]["lab-a"]["ratio"] == pytest.approx(lab_a / lab_b) and 0.15 < lab_a / lab_b < 0.25


def test_per_rank_memory_is_one_row_per_rank_with_units(seven):
    smoke = group_runs(seven).groups[0]
    rows = {row["label"]: row for row in quantity_rows(smoke)}
    assert rows["peak memory, rank 1"]["unit"] == "GiB"
    assert rows["peak memory, rank 1"]["cells"]["lab-b"]["value"] == pytest.approx(1.21)
    assert rows["peak memory, rank 1"]["cells"]["lab-b"]["ratio"] == pytest.approx(1.21 / 0.61)
    table = comparison_table(group_runs(seven))
    memory = table[table["statistic"] == "peak memory, rank 1"]
    assert set(memory["unit"]) == {"GiB"} and len(memory) == 4  # one row per grouped run
    assert memory.loc[memory["machine"] == "lab-b", "value"].item() == pytest.approx(1.21)
    assert memory.loc[memory["machine"] == "lab-b", "ratio"].item() == pytest.approx(1.21 / 0.61)
    assert memory["beyond_noise"].isna().all()  # memory has no interval: nothing said about noise
    assert "peak memory, rank 0" in set(table["statistic"])
    cells = [str(v) for v in table.to_numpy().ravel()]
    assert not any(c.startswith("{") or c.startswith("[") for c in cells)  # no JSON in a cell
    per_run = table.groupby("run id", sort=False)["comparable"].first()
    assert per_run.tolist() == [True] * 4 + [False] * 3
    assert table.drop_duplicates("run id")["not comparable because"].notna().sum() == 3


def test_gate_verdicts_side_by_side(seven):
    smoke = group_runs(seven).groups[0]
    rows = {row["gate"]: row["verdicts"] for row in gate_rows(smoke)}
    assert rows["optimizer_step_time"] == {"lab-a": "PASS", "lab-b": "FAIL"}  # 2.5 s steps fail 1.82 s


def test_comparison_page_has_one_table_per_group_and_the_stragglers_apart(tmp_path, seven):
    comparison = group_runs(seven, reference="lab-b")
    figures = {"loss": tmp_path / "loss.png", "step_time": tmp_path / "step.png"}
    overlay_figure(comparison, "loss", "loss", figures["loss"])
    overlay_figure(comparison, "step_time", "s", figures["step_time"])
    page = render_comparison(comparison, figures, "lab-b")
    assert "<table id='group-1' class='fixed comparison'>" in page and "<table id='group-2'" in page
    assert "<table id='group-3'" not in page
    apart = page[page.index("<table id='not-comparable'") :]
    apart = apart[: apart.index("</table>")]
    assert apart.count("<tr>") == 1 + 3 and "the only run of profile gpu-1x" in apart
    assert "compare_reference: lab-b" in page and "lab-b (reference)" in page
    assert not re.search(r"\{'?\d'?:", page)  # no dict printed
    assert page.count("data:image/png;base64,") == 2


def test_overlay_curves_are_the_measures_series(seven, tmp_path, monkeypatch):
    drawn = []
    import matplotlib.axes

    original = matplotlib.axes.Axes.plot

    def spy(self, x, y, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(x), list(y)))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    comparison = group_runs(seven)
    overlay_figure(comparison, "step_time", "s", tmp_path / "step.png")
    assert [label for label, _, _ in drawn] == ["lab-a (reference)", "lab-b", "box-1 (reference)", "box-2"]
    lab_b = measures.step_time_per_step(read_steps(seven[0].directory / "parsed/steps.parquet"))
    assert drawn[1][2] == lab_b.tolist()


def test_an_older_registry_is_not_comparable_and_says_why(tmp_path, tiny_profile):
    runs = [load_run(write_run(tmp_path, tiny_profile, m)) for m in ("lab-a", "lab-b")]
    runs.append(load_run(write_run(tmp_path, tiny_profile, "lab-c", registry=OlderRegistry)))
    assert runs[2].registry is None
    comparison = group_runs(runs)
    assert comparison.groups[0].machines == ["lab-a", "lab-b"]
    reason = comparison.stragglers[0].reason
    assert (
        f"registry contract version {OlderRegistry.VERSION}, this zerogate reads {RunRegistry.VERSION}"
        in reason
    )
    assert "register_run" in reason  # how to rebuild it


def test_missing_registry_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(InputError, match=r"nowhere/registry.json: no run registry"):
        load_run(tmp_path / "nowhere")


def test_a_registry_without_its_run_summary_is_one_line_naming_the_file_and_the_command(
    tmp_path, tiny_profile
):
    run_dir = write_run(tmp_path, tiny_profile, "lab-a")
    (run_dir / "summary/run.json").unlink()
    with pytest.raises(InputError) as found:
        load_run(run_dir)
    assert str(found.value).count("\n") == 0
    assert "lab-a/summary/run.json: no run summary beside the registry" in str(found.value)
    assert "profile=smoke machine=lab-a" in str(found.value)


# Two runs of one setting on one machine (the same 0.5 s step, each its own noise: consecutive steps alike),
# and the same run with rank 1 slowed by 30 % (the straggler injection's effect on the records).
NOISY = dict(step_time=0.5, time_noise=0.1, time_correlation=0.5)


@pytest.fixture
def same_and_slowed(tmp_path, tiny_profile):
    """Two runs of the tiny profile and a third with its straggler injection: a profile of its own (another
    config hash), the same measurement."""
    rule = IntervalRule()
    runs = [
        write_run(
            tmp_path,
            tiny_profile,
            machine,
            steps=synthetic_steps(**NOISY, seed=seed),
            interval_rule=rule,
            resolved=tiny_profile,
        )
        for machine, seed in (("box-a", 1), ("box-b", 2))
    ]
    slowed = {
        **tiny_profile,
        "stabiliser": {
            **tiny_profile.get("stabiliser", {}),
            "inject": {"kind": "slow", "rank": 1, "seconds": 0.02},
        },
    }
    runs.append(
        write_run(
            tmp_path,
            tiny_profile,
            "box-slow",
            interval_rule=rule,
            config_hash="5" * 64,
            resolved=slowed,
            steps=synthetic_steps(**NOISY, seed=3, slow_rank=1, slow_factor=1.3),
        )
    )
    return [load_run(d) for d in runs]


def test_two_runs_of_one_setting_differ_by_no_more_than_noise(same_and_slowed):
    group = group_runs(same_and_slowed[:2], reference="box-a").groups[0]
    step = next(row for row in quantity_rows(group) if row["statistic"] == "step_time_median_s")
    cell = step["cells"]["box-b"]
    assert cell["ratio_interval"].contains(1.0) and cell["beyond_noise"] is False
    assert cell["interval"] == same_and_slowed[1].registry.summary.intervals.step_time_median_s
    assert noise_summary(group) == {"beyond": {}, "judged": 4}
    table = comparison_table(group_runs(same_and_slowed[:2], reference="box-a"))
    timing = table[table["noise basis"].str.startswith("interval", na=False)]
    assert len(timing) == 2 * 4 and not timing["beyond_noise"].any()
    others = table[table["statistic"].notna() & ~table.index.isin(timing.index)]
    assert others["beyond_noise"].isna().all()


def test_a_rank_slowed_by_30_percent_is_beyond_noise_in_the_csv_and_the_page(tmp_path, same_and_slowed):
    comparison = group_runs([same_and_slowed[0], same_and_slowed[2]], reference="box-a")
    assert (
        len(comparison.groups) == 1 and not comparison.stragglers
    )  # the injection alone: the same measurement
    table = comparison_table(comparison)
    slowed = table[
        (table["machine"] == "box-slow") & (table["statistic"] == "median optimizer-step time, slowest rank")
    ]
    assert slowed["beyond_noise"].tolist() == [True]
    assert 1.2 < slowed["ratio low"].item() <= slowed["ratio"].item() <= slowed["ratio high"].item() < 1.4
    assert not table.loc[table["machine"] == "box-a", "beyond_noise"].dropna().any()  # the reference itself
    figures = {"loss": tmp_path / "loss.png", "step_time": tmp_path / "step.png"}
    overlay_figure(comparison, "loss", "loss", figures["loss"])
    overlay_figure(comparison, "step_time", "s", figures["step_time"])
    page = render_comparison(comparison, figures, "box-a")
    assert "Beyond noise: <b>box-slow</b> (median optimizer-step time, slowest rank" in page
    assert "beyond noise</small>" in page and "class='number beyond-noise'" in page
    assert "kind slow, rank 1, seconds 0.02" in page
    assert set(table.loc[table["machine"] == "box-slow", "fault injection"]) == {
        "kind slow, rank 1, seconds 0.02"
    }


def test_the_history_orders_one_machines_runs_by_training_and_flags_a_regression(tmp_path, tiny_profile):
    rule = IntervalRule()
    made = [
        ("aaa1111", 0.5, "2026-11-29T10:00:00+00:00"),
        ("bbb2222", 0.5, "2026-11-30T10:00:00+00:00"),
        ("ccc3333", 0.65, "2026-12-01T10:00:00+00:00"),
    ]
    runs = [
        load_run(
            write_run(
                tmp_path / commit,
                tiny_profile,
                f"box-{commit}",
                commit=commit,
                recorded_at=at,
                interval_rule=rule,
                steps=synthetic_steps(**{**NOISY, "step_time": level}, seed=index),
            )
        )
        for index, (commit, level, at) in enumerate(reversed(made))
    ]
    found = histories(runs)
    assert len(found) == 1 and [r.commit for r in found[0].runs] == ["aaa1111", "bbb2222", "ccc3333"]
    rows = history_rows(found[0])
    assert rows[0]["ratio"] is None and rows[1]["beyond_noise"] is False and rows[2]["beyond_noise"] is True
    assert rows[2]["interval"] == runs[0].registry.summary.intervals.step_time_median_s
    history_figure(found, tmp_path / "history.png")
    assert (tmp_path / "history.png").read_bytes()[:4] == b"\x89PNG"
    comparison = group_runs(runs)
    figures = {
        "loss": tmp_path / "loss.png",
        "step_time": tmp_path / "step.png",
        "history": tmp_path / "history.png",
    }
    overlay_figure(comparison, "loss", "loss", figures["loss"])
    overlay_figure(comparison, "step_time", "s", figures["step_time"])
    page = render_comparison(comparison, figures, None, found)
    history = page[page.index("<table id='history-1'") :]
    history = history[: history.index("</table>")]
    assert history.count("<tr") == 1 + 3 and history.count("class='beyond-noise'") == 1
    assert history.index("aaa1111") < history.index("bbb2222") < history.index("ccc3333")
    assert page.count("data:image/png;base64,") == 3
