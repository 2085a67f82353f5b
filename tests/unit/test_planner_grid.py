"""The planner's validation grid: the grid file's checks and the profiles it writes
(zerogate.bench.grid_points), and the table built from what the pipeline wrote for a point
(zerogate.bench.planner_grid): a point recorded from the grid's run (tests/data/planner_grid/README.md)
and a ledger table built by compare_ledger's own functions. No training."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import render_profile, settings
from tests.unit.test_ledger import _peak_steps, recorded_counts, recorded_ds_config, recorded_run_spec
from zerogate.analysis.ledger_check import (
    BUCKETS_EXCLUDED,
    PEAK_TOLERANCE,
    compare,
    read_measurements,
    with_peaks,
)
from zerogate.bench import grid_points, planner_grid
from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.contracts.ledger import LedgerTable
from zerogate.contracts.planner_grid import PlannerGridTable
from zerogate.contracts.records import GitState, LiveTensorPeak
from zerogate.errors import InputError
from zerogate.predict.peak import peak_prediction
from zerogate.predict.setup import setup_from_config
from zerogate.render.variants import VARIANTS

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parents[1] / "data" / "planner_grid"
GRID = grid_points.GRID_FILE
NO_GIT = GitState(commit=None, dirty=None)


def shipped() -> dict:
    return yaml.safe_load((REPO / GRID).read_text())


def grid_repo(tmp_path: Path, raw: dict) -> Path:
    """A repository holding ``raw`` as its grid beside the real profiles, schemas and model configs."""
    for folder in ("config/profiles", "config/schemas", "config/models", "config/deepspeed"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / GRID).write_text(yaml.safe_dump(raw, sort_keys=False))
    return tmp_path


def one_point(**point) -> dict:
    base = {"id": "p", "zero": "zero3", "overrides": {"dataset": {"seq_len": 128}}}
    return {"base": "planner-grid", "points": [{**base, **point}]}


# --- the grid file ------------------------------------------------------------------------------------------


def test_the_shipped_grid_spans_what_it_is_meant_to():
    grid, profiles = grid_points.check_grid(REPO)
    assert len(grid.points) >= 12
    stages = {VARIANTS[p.zero][0] for p in grid.points}
    assert stages == {0, 1, 2, 3}
    assert any(VARIANTS[p.zero][1] for p in grid.points) and any(VARIANTS[p.zero][2] for p in grid.points)
    resolved = [
        settings(
            resolve_profile(
                [
                    *load_profile_chain(REPO / "config/profiles", grid.base, GRID, "base"),
                    (REPO / GRID, {k: v for k, v in profile.items() if k != "extends"}),
                ]
            )
        )
        for profile in profiles.values()
    ]
    micro = {s.training.run.micro_batch_per_rank for s in resolved}
    seq = {s.dataset.seq_len for s in resolved}
    assert min(micro) == 1 and max(micro) == 8 and min(seq) == 128 and max(seq) == 512
    assert {s.training.run.activation_checkpointing for s in resolved} == {True, False}
    assert {s.model.attention for s in resolved} == {"sdpa", "eager"}
    assert {s.model.architecture for s in resolved} >= {"llama", "qwen2", "gpt2"}


def test_a_point_profile_is_the_base_with_the_points_keys_and_its_variants_stage(tmp_path):
    raw = one_point(
        zero="zero2-offload", overrides={"training": {"micro_batch_per_rank": 4}, "dataset": {"seq_len": 256}}
    )
    repo = grid_repo(tmp_path, raw)
    written = grid_points.write_profiles(repo, tmp_path / "out", GRID)
    assert [p.name for p in written] == ["planner-grid-p.yaml"]
    profile = yaml.safe_load(written[0].read_text())
    assert profile["extends"] == "planner-grid"
    chain = load_profile_chain(repo / "config/profiles", str(written[0]), "test", "profile")
    typed = settings(resolve_profile(chain))
    assert typed.training.run.micro_batch_per_rank == 4 and typed.dataset.seq_len == 256
    assert typed.training.run.optimizer_steps == settings("planner-grid").training.run.optimizer_steps
    ds_config = render_profile(typed, CPU_FINGERPRINT).ds_config  # as render_deepspeed_config renders it
    assert (ds_config.stage, planner_grid.offload_of(ds_config)) == (2, "optimizer")


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda g: g["points"][0].update(zero="zero4"), "config/planner_grid.yaml: points[0] (p): zero: "),
        (
            lambda g: g["points"].append(copy.deepcopy(g["points"][0])),
            "config/planner_grid.yaml: points[1] (p): id: also the id of points[0]",
        ),
        (
            lambda g: g["points"][0].update(id="Has Spaces"),
            "config/planner_grid.yaml: points[0] (Has Spaces): id: ",
        ),
        (
            lambda g: g["points"][0].update(overrides={"extends": "cpu-tiny"}),
            "config/planner_grid.yaml: points[0] (p): overrides.extends: a point extends the grid's base",
        ),
        (lambda g: g.pop("base"), "config/planner_grid.yaml: base: "),
        (lambda g: g.update(points=[]), "config/planner_grid.yaml: points: "),
    ],
)
def test_a_malformed_grid_is_refused_naming_the_file_the_point_and_the_key(tmp_path, change, expected):
    raw = one_point()
    change(raw)
    (tmp_path / "config").mkdir()
    (tmp_path / GRID).write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as error:
        grid_points.read_grid(tmp_path / GRID, GRID)
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            {"training": {"micro_batch_per_rank": 0}},
            "config/planner_grid.yaml: points[0] (p): overrides.training.micro_batch_per_rank: ",
        ),
        (
            {"training": {"micro_batch_per_rnak": 2}},
            "config/planner_grid.yaml: points[0] (p): overrides.training.micro_batch_per_rnak: unknown key",
        ),
        (
            {"model": {"attention": "flash"}},
            "config/planner_grid.yaml: points[0] (p): overrides.model.attention: ",
        ),
        (
            {"model": {"config": "config/models/gpt2.json"}, "dataset": {"seq_len": 2048}},
            "config/planner_grid.yaml: points[0] (p): overrides.dataset.seq_len: 2048 exceeds the 1024 "
            "positions",
        ),
        (
            {"model": {"config": "config/models/no-such.json"}},
            "config/planner_grid.yaml: points[0] (p): overrides.model.config: no such config.json",
        ),
    ],
)
def test_a_point_whose_profile_is_bad_is_refused_before_anything_is_written(tmp_path, overrides, expected):
    raw = one_point(overrides=overrides)
    raw["points"].insert(1, {"id": "fine", "zero": "zero0", "overrides": {}})
    repo = grid_repo(tmp_path, raw)
    with pytest.raises(InputError) as error:
        grid_points.write_profiles(repo, tmp_path / "out", GRID)
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()  # not even the good point's profile


def test_a_bad_key_the_base_sets_names_the_base_profile(tmp_path):
    repo = grid_repo(tmp_path, {**one_point(), "base": "broken"})
    (repo / "config/profiles/broken.yaml").write_text(
        "extends: planner-grid\ntraining: {optimizer_steps: 0}\n"
    )
    with pytest.raises(InputError) as error:
        grid_points.check_grid(repo)
    assert str(error.value).startswith(f"{repo / 'config/profiles/broken.yaml'}: training.optimizer_steps: ")


# --- the table ----------------------------------------------------------------------------------------------


def recorded_point() -> planner_grid.PointRun:
    """A point as the grid's run copied it (tests/data/planner_grid/README.md)."""
    return planner_grid.read_point(
        "recorded",
        RECORDED / "ledger_vs_measured.json",
        RECORDED / "run_spec.json",
        RECORDED / "ds_config.json",
        RECORDED / "train.tsv",
    )


def test_the_recorded_points_rows_are_its_ledger_tables_levels_unchanged():
    run = recorded_point()
    rows = planner_grid.point_levels(run)
    assert [r.level for r in rows] == [
        level for level in dict.fromkeys(r.level for r in run.ledger.levels) if level in planner_grid.TARGETS
    ]
    for row in rows:
        same_level = [r for r in run.ledger.levels if r.level == row.level]
        worst = max(same_level, key=lambda r: abs(r.error_percent))
        assert (row.rank, row.predicted_bytes, row.measured_bytes, row.error_percent) == (
            worst.rank,
            worst.predicted_bytes,
            worst.measured_bytes,
            worst.error_percent,
        )
        assert row.within_target == (abs(row.error_percent) <= planner_grid.TARGETS[row.level])
        assert row.parameters == run.ledger.parameters and row.scheme == run.ledger.scheme
    resident = next(r for r in rows if r.level == "resident_set")
    peak_row = next(r for r in run.ledger.peak.rows if r.rank == resident.rank)
    assert (
        resident.with_allocator_free_error_percent == peak_row.with_allocator_free_error_percent is not None
    )
    assert all(r.with_allocator_free_error_percent is None for r in rows if r.level != "resident_set")
    assert rows[0].micro_batch == run.run_spec.training.micro_batch_per_rank
    assert rows[0].seq_len == run.run_spec.seq_len and rows[0].stage == run.ds_config.stage
    assert rows[0].train_seconds == pytest.approx(planner_grid.train_seconds(RECORDED / "train.tsv"))


def built_point(tmp_path: Path, live_over: float) -> planner_grid.PointRun:
    """The recorded 2-rank default run (tests/data/held_bytes) through compare_ledger's own functions, its
    sampled step's live tensors ``live_over`` times the predicted tensor peak."""

    counts, ds_config, run_spec = recorded_counts(), recorded_ds_config(), recorded_run_spec()
    setup = setup_from_config(ds_config, run_spec)
    prediction = peak_prediction(counts, setup, None)
    tensor = prediction.levels["tensor"]
    bucket = tensor.terms_bytes["reduce_bucket"]
    for rank in (0, 1):
        LiveTensorPeak(
            rank=rank,
            step=4,
            peak_bytes=int(bucket + (tensor.predicted_bytes - bucket) * live_over),
            at_start_bytes=0,
            buffers_bytes={"reduce_bucket": bucket},
            seconds=1.0,
            how="a test's",
        ).write(tmp_path / f"live_tensors_rank{rank}.json")
    resident = prediction.levels["resident_set"].predicted_bytes / 2**30
    steps = _peak_steps([resident * 1.05], [resident])
    measured = read_measurements(tmp_path, steps)
    table = with_peaks(compare(counts, setup, measured), prediction, steps, measured)
    path = table.write(tmp_path / "ledger_vs_measured.json")
    return planner_grid.PointRun("built", LedgerTable.read(path), run_spec, ds_config, None)


def test_a_point_within_its_targets_and_one_beyond_them(tmp_path):
    (tmp_path / "fine").mkdir()
    (tmp_path / "off").mkdir()
    fine, off = built_point(tmp_path / "fine", 1.0), built_point(tmp_path / "off", 1.25)
    fine_rows = {r.level: r for r in planner_grid.point_levels(fine)}
    assert set(fine_rows) == {"tensor", BUCKETS_EXCLUDED, "resident_set"}
    assert all(r.within_target for r in fine_rows.values())
    assert fine_rows["resident_set"].target_percent == PEAK_TOLERANCE
    assert fine_rows["resident_set"].error_percent == pytest.approx(100 * (1 / 1.05 - 1), abs=0.01)
    off_rows = {r.level: r for r in planner_grid.point_levels(off)}
    assert off_rows[BUCKETS_EXCLUDED].within_target is False  # the model's share is 25 % above the prediction
    assert off_rows[BUCKETS_EXCLUDED].error_percent == pytest.approx(100 * (1 / 1.25 - 1), abs=0.01)
    # The same definition as the ledger table: its own row, unchanged.
    ledger_row = next(
        r
        for r in off.ledger.levels
        if r.level == BUCKETS_EXCLUDED and r.rank == off_rows[BUCKETS_EXCLUDED].rank
    )
    assert off_rows[BUCKETS_EXCLUDED].error_percent == ledger_row.error_percent
    off = dataclasses.replace(off, point="off")
    table = planner_grid.grid_table([dataclasses.replace(fine, point="fine"), off], GRID, b"grid", NO_GIT)
    # Only the off point misses, at every level beyond its target (the tensor peak too where the recorded
    # run's bucket is small beside the model's share).
    assert f"off: {BUCKETS_EXCLUDED}" in table.missed and "off: resident_set" not in table.missed
    assert table.missed == [f"off: {r.level}" for r in table.rows if r.point == "off" and not r.within_target]
    written = PlannerGridTable.read(table.write(tmp_path / "planner_grid.json"))
    assert written.rows == table.rows
    text = planner_grid.text(table)
    assert "NO (±10 %)" in text
    assert f"2 points, 6 rows: {6 - len(table.missed)} within target, {len(table.missed)} missed" in text
    assert planner_grid.markdown(table).count("\n| fine |") == 3
