"""ZeRO's peers trained for real: FSDP2 (with and without CPUOffloadPolicy) runs the training run's own loop
on the smoke run's data and writes the same per-step, per-rank records as DeepSpeed, resumes from its own
checkpoint, and its loss curve set against ZeRO-3's by the variants' table (zerogate.analysis.variants).
Three short launches side by side on the session smoke run's rendered files (ZeRO-3 shortened the same way,
so that its schedule is theirs); the records' keys are held against the smoke run's own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration import prefetch
from tests.integration.pipeline import env, shortened_launch, side_by_side
from tests.unit.helpers import Trained, variants_table
from zerogate.analysis.parse import read_rank_metrics
from zerogate.analysis.variants import TOLERANCE_FLOOR, relative_differences
from zerogate.contracts.base import read_lines
from zerogate.contracts.records import HeldBytes, StepRecord, TrainSummary
from zerogate.contracts.run import DsConfig, TrainSettings
from zerogate.contracts.summary import SpikeRule
from zerogate.render.variants import engine_of, variant_config

pytestmark = pytest.mark.integration

STEPS = 8
VARIANTS = ("zero3", "fsdp2", "fsdp2-offload")


def launch(workdir: Path, results: Path, out: Path, name: str) -> subprocess.CompletedProcess:
    """zerogate.train.loop through the launcher on ``name``'s config (zerogate.render.variants), checkpoints
    every four steps."""
    command = shortened_launch(results, out, STEPS, checkpoint={"every_steps": 4, "keep": 1})
    config, _ = variant_config(DsConfig.read(out / "ds_config.json").raw, name)
    (out / "ds_config.json").write_text(json.dumps(config))
    engine = engine_of(name)
    command += [] if engine == "deepspeed" else ["--engine", engine]
    return subprocess.run(command, cwd=workdir, env=env(), capture_output=True, text=True, timeout=900)


@prefetch.prefetched
def prepare_peer_runs(tmp_path_factory, smoke_run):
    """The three launches side by side, on a copy of the smoke run's rendered files and dataset."""
    root = tmp_path_factory.mktemp("zerogate-peers")
    launches = {
        name: lambda workdir, inputs, out, name=name: launch(workdir, inputs, out, name) for name in VARIANTS
    }
    build = side_by_side(root, smoke_run.workdir, smoke_run.results, launches)
    return lambda: (root, build())


@pytest.fixture(scope="module")
def peer_runs(smoke_run, tmp_path_factory) -> dict[str, Path]:
    root, done = prefetch.result(__name__, prepare_peer_runs, tmp_path_factory, smoke_run)
    for name, result in done.items():
        assert result.returncode == 0, (name, result.stderr[-3000:])
    return {name: root / name for name in VARIANTS}


def test_fsdp2_writes_the_records_deepspeed_writes(peer_runs, smoke_run):
    reference = read_lines(StepRecord, smoke_run.results / "train/metrics/rank0.jsonl")
    for name in ("fsdp2", "fsdp2-offload"):
        summary = TrainSummary.read(peer_runs[name] / "train/summary.json")
        assert summary.engine == "fsdp2" and summary.completed_steps == STEPS
        for rank in (0, 1):
            records = read_lines(StepRecord, peer_runs[name] / f"train/metrics/rank{rank}.jsonl")
            assert [r.step for r in records] == list(range(1, STEPS + 1))
            assert all(
                r.update_applied and r.grad_norm is not None and r.collectives_s is not None for r in records
            )
            # The same measurements present: every key DeepSpeed's run fills, this one fills.
            filled = {k for k, v in records[0].model_dump(by_alias=True).items() if v is not None}
            assert filled >= {
                k for k, v in reference[0].model_dump(by_alias=True).items() if v is not None
            } - {"loss_scale"}
            held = HeldBytes.read(peer_runs[name] / f"train/metrics/held_bytes_rank{rank}.json")
            # Its shards, not the whole model: the parameters half of the fp32 whole, Adam's two states twice
            # that.
            assert held.parameters_bytes * 2 == 4 * held.parameter_count == held.optimizer_states_bytes


def test_fsdp2_resumes_from_its_own_checkpoint(peer_runs, smoke_run):
    out = peer_runs["fsdp2"]
    before = (out / "train/metrics/rank0.jsonl").read_text()
    again = launch(smoke_run.workdir, smoke_run.results, out, "fsdp2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stderr + (out / "train.log").read_text()
    assert (out / "train/metrics/rank0.jsonl").read_text() == before  # nothing retrained, nothing lost


def test_the_variants_table_sets_fsdp2_against_zero(peer_runs, smoke_run):
    runs = {
        name: Trained(
            read_rank_metrics(path / "train/metrics"), TrainSummary.read(path / "train/summary.json")
        )
        for name, path in peer_runs.items()
    }
    settings = TrainSettings.read(smoke_run.results / "train/settings.json")
    table = variants_table(
        runs, warmup_steps=2, spike_rule=SpikeRule.from_settings(settings.stabiliser), expected_steps=STEPS
    )
    assert [row.engine for row in table.rows] == ["deepspeed", "fsdp2", "fsdp2"]
    assert all(row.statistics.run_complete for row in table.rows)
    assert "moves nothing" in table.rows[2].note  # CPUOffloadPolicy on the CPU accelerator
    by_pair = {(a.peer, a.reference): a for a in table.agreement}
    assert set(by_pair) == {
        ("fsdp2", "zero3")
    }  # fsdp2-offload's ZeRO variant (zero3-offload-all) is not trained here
    # Every engine starts from the same initial weights at the same seed (zerogate.model.build.build_model):
    # the same first loss, and, two ranks summing in float32 either way, within float32 rounding after it.
    agreement = by_pair[("fsdp2", "zero3")]
    assert agreement.first_step_relative_difference == 0
    assert agreement.max_relative_difference <= TOLERANCE_FLOOR
    assert agreement.within is None  # none of ZeRO-0/1/2 trained: no tolerance, not judged
    assert relative_differences(runs["fsdp2-offload"].steps, runs["zero3"].steps).max() <= TOLERANCE_FLOOR
