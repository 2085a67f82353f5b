"""Synthetic runs for the gate, figure and report tests, built from the producers' own types: every step is a
zerogate.contracts.records.StepRecord and the table is parse.steps_table's, so a test sees the columns the
pipeline writes and nothing else."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.gates import evaluate, evaluate_gate
from zerogate.analysis.health import completion_of, finished_run_completion
from zerogate.analysis.parse import parse_launcher_log, steps_table
from zerogate.analysis.summary import AnalysisSettings, RunRecords, summarise
from zerogate.analysis.variants import VariantRun, VariantRuns
from zerogate.analysis.variants import compare as compare_variants
from zerogate.config.judging import GateSettings
from zerogate.config.machines import MachineDescription, check
from zerogate.config.profile import load_profile_chain, resolve_profile, with_model_config
from zerogate.config.settings import ProfileSettings, profile_settings
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.parsed import RunMeta
from zerogate.contracts.plan import Plan
from zerogate.contracts.records import GitState, StabiliserSummary, StepRecord, TrainSummary
from zerogate.contracts.report import VariantsTable
from zerogate.contracts.run import Deviations, DsConfig, RunSpec
from zerogate.contracts.summary import IntervalRule, RunSummary, SpikeRule
from zerogate.contracts.verdicts import GateVerdict, GateVerdicts

REPO = Path(__file__).resolve().parents[2]


def step_record(**fields: Any) -> StepRecord:
    """One rank's record of one optimizer step, the CPU accelerator's fields by default."""
    step_time = fields.pop("step_time_s", 0.5)
    defaults: dict[str, Any] = {
        "step": 1,
        "rank": 0,
        "loss": 3.0,
        "loss_finite": True,
        "grad_norm": 1.0,
        "lr": 1e-3,
        "step_time_s": step_time,
        "micro_step_time_s": step_time / 8,
        "tokens": 200,
        "tokens_per_s": 200 / step_time if step_time > 0 else None,
        "elapsed_s": 1.0,
        "device": "cpu",
        "update_applied": True,
        "rss_gib": 0.6,
        "peak_rss_gib": 0.6,
        "device_peak_gib": 0.6,
        "device_peak_source": "VmHWM per step",
    }
    defaults.update(fields)
    if "loss" in fields and "loss_finite" not in fields:
        defaults["loss_finite"] = bool(np.isfinite(fields["loss"]))
    return StepRecord(**defaults)


def table_of(records: list[StepRecord]) -> pd.DataFrame:
    """The steps table parse_logs writes for these records."""
    return steps_table(records)


def synthetic_steps(
    steps: int = 200,
    ranks: int = 2,
    step_time: float = 0.5,
    loss_start: float = 5.0,
    loss_end: float = 1.0,
    memory_gib: float = 0.6,
    noise: float = 0.05,
    seed: int = 0,
    time_noise: float = 0.02,
    time_correlation: float = 0.0,
    slow_rank: int | None = None,
    slow_factor: float = 1.0,
) -> pd.DataFrame:
    """A run whose truth is known: each rank's step time is ``step_time`` times (1 + ``time_noise`` x an
    AR(1) series with lag-one correlation ``time_correlation``: consecutive steps alike, as on a loaded
    machine); ``slow_rank`` takes ``slow_factor`` times as long."""
    rng = np.random.default_rng(seed)
    loss = np.linspace(loss_start, loss_end, steps) + rng.normal(0, noise, steps)
    records = []
    innovation = np.sqrt(1 - time_correlation**2)
    for rank in range(ranks):
        level = 0.0
        factor = slow_factor if rank == slow_rank else 1.0
        for i in range(steps):
            level = time_correlation * level + innovation * rng.standard_normal()
            t = step_time * factor * (1 + time_noise * level)
            memory = memory_gib + 0.01 * rank
            records.append(
                step_record(
                    step=i + 1,
                    rank=rank,
                    loss=float(loss[i]),
                    step_time_s=t,
                    elapsed_s=t * (i + 1),
                    rss_gib=memory,
                    peak_rss_gib=memory,
                    device_peak_gib=memory,
                )
            )
    return table_of(records)


def no_events() -> pd.DataFrame:
    return parse_launcher_log("")


def settings(profile: str | dict) -> ProfileSettings:
    """A real profile's typed settings (by name), or a resolved profile's."""
    if isinstance(profile, str):
        profile = resolve_profile(
            load_profile_chain(REPO / "config/profiles", profile, "config/config.yaml", "profile")
        )
    return with_model_config(profile_settings(profile))


def spike_rule(profile: str | dict) -> SpikeRule:
    """The profile's loss-spike rule, from its stabiliser settings as train/settings.json carries them."""
    return SpikeRule.from_settings(settings(profile).stabiliser)


class Rendered(NamedTuple):
    """render_deepspeed_config's three outputs: the config as written to ds_config.json, the deviations from
    the claim's config, the run spec."""

    config: dict[str, Any]
    deviations: Deviations
    run_spec: RunSpec

    @property
    def ds_config(self) -> DsConfig:
        return DsConfig.of(self.config, "deepspeed/ds_config.json")


def render_profile(
    profile: str | dict | ProfileSettings,
    fingerprint: Fingerprint,
    *,
    claim: dict | None = None,
    overrides: tuple | list = (),
    steps: int | None = None,
    template_file: str | None = None,
) -> Rendered:
    """A profile (its name, a resolved profile or its settings) rendered for ``fingerprint`` from the settings
    render_deepspeed_config's rule passes: the profile's claim config unless ``claim`` is given, the
    profile's overrides then ``overrides`` ({path, value, reason}), ``steps`` optimizer steps if given."""
    from zerogate.render.ds_config import RenderInputs, render

    typed = profile if isinstance(profile, ProfileSettings) else settings(profile)
    template = template_file or typed.deepspeed.template
    if claim is None:
        claim = json.loads((REPO / typed.deepspeed.template).read_text())
    training = (
        typed.training.run
        if steps is None
        else typed.training.run.model_copy(update={"optimizer_steps": steps})
    )
    return Rendered(
        *render(
            claim,
            RenderInputs(
                model=typed.model,
                training=training,
                overrides=[*typed.deepspeed.overrides, *overrides],
                seq_len=typed.dataset.seq_len,
                vocab_size=typed.vocab_size,
                fingerprint=fingerprint,
                template_file=template,
            ),
        )
    )


def train_summary(completed_steps: int = 200, world_size: int = 2, **changes: Any) -> TrainSummary:
    """Rank 0's train/summary.json of a finished fp32 run on the CPU, with ``changes`` to its fields."""
    fields: dict[str, Any] = {
        "completed_steps": completed_steps,
        "resumed_from_step": None,
        "world_size": world_size,
        "stabiliser": StabiliserSummary(policy="skip", skipped_steps=0, rollbacks=0, skipped_windows=[]),
        "parameters": 139584,
        "wall_time_s": 120.0,
        "metrics_time_s": 0.5,
        "dtype": "fp32",
        "accelerator": "cpu",
        "git": GitState(commit="abc123", dirty=False),
    }
    return TrainSummary(**{**fields, **changes})


# The claimed box as the tests describe it (the claim's two cards; config/machines has the full description).
def claim_box() -> Fingerprint:
    from tests.conftest import gpu_fingerprint

    return gpu_fingerprint(("NVIDIA GeForce RTX 5070", 12), ("NVIDIA GeForce RTX 4090", 24))


@functools.cache
def rendered_run(
    on: str = "cpu", profile: str = "cpu-tiny", overrides: tuple = ()
) -> tuple[DsConfig, Deviations, RunSpec]:
    """A profile as render_deepspeed_config renders it on this CPU machine (``"cpu"``: fp32, the CPU trains
    without fp16) or on the claimed box (``"claim box"``: the claim's fp16 with its dynamic loss scaler),
    with ``overrides`` ((path, value) pairs) after the profile's own."""
    from tests.conftest import CPU_FINGERPRINT

    added = [{"path": path, "value": value, "reason": "the test's"} for path, value in overrides]
    rendered = render_profile(profile, CPU_FINGERPRINT if on == "cpu" else claim_box(), overrides=added)
    return rendered.ds_config, rendered.deviations, rendered.run_spec


def run_spec_for(steps: int = 200, world_size: int = 2, on: str = "cpu") -> RunSpec:
    """cpu-tiny's rendered run spec, for a run of ``steps`` optimizer steps on ``world_size`` ranks."""
    spec = rendered_run(on)[2]
    return spec.model_copy(
        update={
            "world_size": world_size,
            "training": spec.training.model_copy(update={"optimizer_steps": steps}),
        }
    )


@functools.cache
def planned_run() -> Plan:
    """The planner's plan of cpu-tiny on this CPU machine (probed without measurements: no floor figures)."""
    from tests.conftest import CPU_FINGERPRINT
    from zerogate.config.machines import from_fingerprint
    from zerogate.predict.planner import plan_for_run

    ds_config, _, spec = rendered_run("cpu")
    return plan_for_run(
        spec, ds_config, from_fingerprint(CPU_FINGERPRINT, "testbox"), settings("cpu-tiny").plan, "cpu-tiny"
    )


def described(machine: MachineDescription, **changes: Any) -> MachineDescription:
    """``machine`` with ``changes``, checked again as a description: a key's new value, or for a section
    (``host``) a mapping of the keys that change in it."""
    plain = machine.plain()
    for key, value in changes.items():
        section = plain.get(key)
        plain[key] = {**section, **value} if isinstance(value, dict) and isinstance(section, dict) else value
    return check(plain, "the test's machine")


def with_optimizer_step_floor(plan: Plan, seconds: float | None) -> Plan:
    """``plan`` with its optimizer-step floor set to ``seconds`` (what a measured compute term would give)."""
    return plan.model_copy(
        update={"floor": plan.floor.model_copy(update={"optimizer_step_floor_s": seconds})}
    )


def clean_checkout(copy: Path) -> Path:
    """The workflow alone under ``copy`` (no results, no .snakemake), as a clean checkout has it."""
    for name in ("Snakefile", "workflow", "config", "profiles", "envs"):
        source = REPO / name
        (
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
            if source.is_dir()
            else shutil.copy(source, copy / name)
        )
    return copy


def broken_copy(table: Path, tmp_path: Path, index: int, change) -> Path:
    """A copy of the setups ``table`` under ``tmp_path`` (``setups.yaml``) with ``change`` applied to its row
    ``index``."""
    import yaml

    raw = yaml.safe_load(table.read_text())
    change(raw["setups"][index])
    path = tmp_path / "setups.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_snakemake(checkout: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``snakemake --cores 1 ARGS`` in ``checkout``, with its own package first on the path."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(checkout / "workflow"),
    }
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summarised(
    steps: pd.DataFrame,
    warmup_steps: int,
    rule: SpikeRule,
    *,
    run_spec: RunSpec | None = None,
    run_meta: RunMeta | None = None,
    interval_rule: IntervalRule | None = None,
    repeat_steps: list[pd.DataFrame] = (),
    repeat_run_metas: list[RunMeta | None] = (),
    events: pd.DataFrame | None = None,
) -> RunSummary:
    """The run's summary as the summarise_run rule writes it, from the same inputs (read back from JSON)."""
    metas = [run_meta, *repeat_run_metas]
    records = RunRecords(
        tables=[steps, *repeat_steps],
        completions=[None if meta is None else completion_of(meta) for meta in metas],
        world_size=None if run_spec is None else run_spec.world_size,
        expected_steps=None if run_spec is None else run_spec.training.optimizer_steps,
        finished_world_size=None if run_meta is None else run_meta.world_size,
        events=events,
    )
    summary = summarise(records, AnalysisSettings(warmup_steps, rule, interval_rule))
    return RunSummary.parse(json.loads(json.dumps(summary.as_json())), "summary/run.json")


def judged_run(
    gates: tuple,
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    run_spec: RunSpec,
    deviations: Deviations,
    fingerprint: Fingerprint,
    warmup_steps: int,
    rule: SpikeRule,
    plan: Plan | None = None,
    run_meta: RunMeta | None = None,
    ds_config: DsConfig | None = None,
    interval_rule: IntervalRule | None = None,
    repeat_steps: list[pd.DataFrame] = (),
) -> GateVerdicts:
    """check_gates on these inputs: the run summarised (summarise_run), then every gate judged."""
    run = RunEvidence(
        run_summary=summarised(
            steps,
            warmup_steps,
            rule,
            run_spec=run_spec,
            run_meta=run_meta,
            interval_rule=interval_rule,
            repeat_steps=repeat_steps,
            events=events,
        ),
        steps=steps,
        events=events,
        run_meta=run_meta,
        train_summary=summary,
        run_spec=run_spec,
        deviations=deviations,
        fingerprint=fingerprint,
        ds_config=ds_config,
        plan=plan,
    )
    return evaluate(gates, run)


def judged_gate(
    gate: GateSettings,
    steps: pd.DataFrame,
    events: pd.DataFrame,
    summary: TrainSummary | None,
    fingerprint: Fingerprint,
    warmup_steps: int,
    expected_steps: int,
    rule: SpikeRule,
    plan: Plan | None = None,
    run_meta: RunMeta | None = None,
    *,
    world_size: int,
    ds_config: DsConfig | None = None,
    interval_rule: IntervalRule | None = None,
    repeat_steps: list[pd.DataFrame] = (),
) -> GateVerdict:
    """One gate judged on these inputs, as check_gates judges it (the run spec: cpu-tiny's with this
    world size and optimizer steps)."""
    spec = run_spec_for(expected_steps, world_size)
    run = RunEvidence(
        run_summary=summarised(
            steps,
            warmup_steps,
            rule,
            run_spec=spec,
            run_meta=run_meta,
            interval_rule=interval_rule,
            repeat_steps=repeat_steps,
            events=events,
        ),
        steps=steps,
        events=events,
        run_meta=run_meta,
        train_summary=summary,
        run_spec=spec,
        fingerprint=fingerprint,
        ds_config=ds_config,
        plan=plan,
    )
    return evaluate_gate(gate, run)


class Trained(NamedTuple):
    """A trained variant's records (parse.read_rank_metrics) and its training run's summary."""

    steps: pd.DataFrame
    summary: TrainSummary


def variant_run(
    trained: Trained,
    warmup_steps: int,
    rule: SpikeRule,
    expected_steps: int | None = None,
    interval_rule: IntervalRule | None = None,
) -> VariantRun:
    """The variant as compare_variants reads it: its run summarised as summarise_variant summarises it."""
    steps, summary = trained
    records = RunRecords(
        tables=[steps],
        completions=[finished_run_completion(steps, expected_steps, summary.world_size)],
        expected_steps=expected_steps,
        finished_world_size=summary.world_size,
    )
    made = summarise(records, AnalysisSettings(warmup_steps, rule, interval_rule))
    return VariantRun(steps, summary, RunSummary.parse(json.loads(json.dumps(made.as_json())), "run.json"))


def variants_table(
    runs: dict[str, Trained],
    *,
    warmup_steps: int,
    spike_rule: SpikeRule,
    expected_steps: int | None = None,
    interval_rule: IntervalRule | None = None,
    **table: Any,
) -> VariantsTable:
    """compare_variants on these trained variants (``table``: VariantRuns' other fields)."""
    summarised_runs = {
        name: variant_run(trained, warmup_steps, spike_rule, expected_steps, interval_rule)
        for name, trained in runs.items()
    }
    return compare_variants(VariantRuns(summarised_runs, **table))
