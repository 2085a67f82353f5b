"""The run's report: the verdicts first, then the summary, figures, evaluation, ledger, deviations and
provenance, rendered from the contracts the pipeline's rules write (a synthetic run of the tiny profile,
rendered and judged by the producers themselves)."""

import dataclasses
import re
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import (
    judged_run,
    no_events,
    render_profile,
    settings,
    spike_rule,
    summarised,
    synthetic_steps,
    train_summary,
)
from zerogate.analysis import measures
from zerogate.analysis.bootstrap import timing_intervals
from zerogate.analysis.columns import STEP_TIME
from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.ledger_check import compare as ledger_compare
from zerogate.analysis.ledger_check import read_measurements, with_peaks
from zerogate.analysis.parse import event_table, parse_launcher_log, run_metadata, stabiliser_events
from zerogate.analysis.summary import summarise_repeats, summarise_run
from zerogate.config.machines import from_fingerprint
from zerogate.config.training import StabiliserSettings
from zerogate.contracts.base import write_lines
from zerogate.contracts.machine import NodeFingerprint
from zerogate.contracts.plan import ModelComputeMeasurement, PeakPrediction, PredictedPeak
from zerogate.contracts.records import (
    EvalRecord,
    GitState,
    HeldBytes,
    LiveTensorPeak,
    StabiliserEvent,
    column,
)
from zerogate.contracts.report import DatasetFacts, GitAtStages, MachineFacts, Provenance
from zerogate.contracts.run import Deviation, Deviations, DsConfig, RunSpec
from zerogate.contracts.summary import IntervalRule, SpikeRule
from zerogate.contracts.verdicts import (
    CANNOT_JUDGE,
    DOES_NOT_HOLD,
    ClaimedBox,
    ClaimVerdict,
    ClaimVerdicts,
    JudgedClaim,
)
from zerogate.predict.peak import peak_for_run
from zerogate.predict.planned_run import run_setup
from zerogate.predict.planner import plan_for_run
from zerogate.predict.zero_terms import model_state_bytes
from zerogate.report.figures import loss_figure, memory_figure, step_time_figure
from zerogate.report.html import ReportFigures, render_html, section

PROFILE = "cpu-tiny"  # the tiny_profile fixture's profile
STEPS = 200  # synthetic_steps' optimizer steps


@dataclasses.dataclass(frozen=True)
class Rendered:
    """The tiny profile rendered for the test machine as render_deepspeed_config renders it, for a run of
    STEPS optimizer steps (the synthetic runs' length)."""

    ds_config: DsConfig
    deviations: Deviations
    run_spec: RunSpec


@lru_cache(maxsize=1)
def rendered() -> Rendered:
    rendered = render_profile(PROFILE, CPU_FINGERPRINT, steps=STEPS)
    return Rendered(rendered.ds_config, rendered.deviations, rendered.run_spec)


def provenance(
    profile: str = "smoke",
    run_id: str = "smoke-box-12345678",
    config_hash: str = "f" * 64,
    dataset_hash: str = "d" * 64,
    resolved_profile: dict | None = None,
    measurement_hash: str | None = None,
) -> Provenance:
    """provenance.json of a run on the test machine (what it measured: its config hash unless told)."""
    machine = CPU_FINGERPRINT
    git = GitState(commit="abc123", dirty=False)
    return Provenance(
        pipeline_version="0.1.0",
        run_id=run_id,
        recorded_at="2026-11-29T00:00:00+00:00",
        git=GitAtStages(at_training=git, at_report=git),
        profile=profile,
        config_hash=config_hash,
        measurement_hash=measurement_hash or config_hash,
        resolved_profile=resolved_profile or {},
        ds_config=rendered().ds_config.raw,
        packages={"torch": "2.13.0", "deepspeed": "0.19.8"},
        machine=MachineFacts(
            hostname=machine.hostname,
            platform=machine.platform,
            cpu=machine.cpu,
            ram=machine.ram,
            accelerator=machine.accelerator,
        ),
        dataset=DatasetFacts(source="builtin-tasks", content_sha256=dataset_hash, splits={}),
    )


DEVIATION = Deviation(
    path="fp16.enabled",
    claim=True,
    rendered=False,
    kind="changed",
    reason="no fp16 on CPU",
    changes_experiment=True,
)


def verdicts_of(
    profile: dict,
    steps,
    events=None,
    deviations=(DEVIATION,),
    plan=None,
    run_meta=None,
    finished: bool = True,
):
    """gates.evaluate on a synthetic run of the rendered tiny profile, as check_gates judges it (a run that
    did not finish wrote no summary)."""
    return judged_run(
        settings(profile).gates,
        steps,
        no_events() if events is None else events,
        train_summary() if finished else None,
        rendered().run_spec,
        Deviations(deviations=list(deviations)),
        CPU_FINGERPRINT,
        5,
        spike_rule(profile),
        plan=plan,
        run_meta=run_meta,
    )


def report_page(
    *,
    verdicts,
    steps,
    provenance,
    deviations,
    figures,
    warmup_steps,
    spike_rule,
    run_meta=None,
    interval_rule=None,
    repeat_steps=(),
    variants_figure=None,
    **tables,
) -> str:
    """write_report's page on these inputs, the run summarised first as summarise_run summarises it
    (``tables``: the other evidence the rule reads: ledger, plan, claims, evaluation, variants)."""
    summary = summarised(
        steps,
        warmup_steps,
        spike_rule,
        run_meta=run_meta,
        interval_rule=interval_rule,
        repeat_steps=repeat_steps,
    )
    run = RunEvidence(
        run_summary=summary,
        steps=steps,
        verdicts=verdicts,
        provenance=provenance,
        deviations=deviations,
        run_meta=run_meta,
        **tables,
    )
    return render_html(run, ReportFigures(run=figures, variants=variants_figure))


def measured_plan():
    """plan/plan_measured.json of the rendered tiny profile on the test machine, with a measured forward +
    backward of 12.5 ms: on a machine with no other figure the optimizer-step floor is 8 x 12.5 ms = 0.1 s."""
    compute = ModelComputeMeasurement(
        forward_backward_s=0.0125,
        samples_s=[0.0125, 0.013],
        threads=1,
        micro_batch=1,
        seq_len=64,
        dtype="fp32",
        parameters=139584,
        through_deepspeed=True,
        how="the test's measurement",
    )
    run = rendered()
    return plan_for_run(
        run.run_spec,
        run.ds_config,
        from_fingerprint(CPU_FINGERPRINT, "testbox"),
        settings(PROFILE).plan,
        PROFILE,
        model_compute=compute,
    )


def test_report_opens_with_verdicts_and_names_its_provenance(tmp_path, tiny_profile):
    steps = synthetic_steps(step_time=2.5)
    verdicts = verdicts_of(tiny_profile, steps)
    figures = {
        "loss": tmp_path / "loss.png",
        "step_time": tmp_path / "step.png",
        "memory": tmp_path / "mem.png",
    }
    loss_figure(steps, no_events(), summarised(steps, 5, spike_rule(tiny_profile)), figures["loss"])
    step_time_figure(steps, summarised(steps, 5, spike_rule(tiny_profile)), verdicts, figures["step_time"])
    memory_figure(steps, summarised(steps, 5, spike_rule(tiny_profile)), verdicts, figures["memory"])
    for path in figures.values():
        assert path.read_bytes()[:4] == b"\x89PNG"
    page = report_page(
        verdicts=verdicts,
        steps=steps,
        provenance=provenance(),
        deviations=Deviations(deviations=[DEVIATION]),
        figures=figures,
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
    )
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "Verdicts"
    table = page[page.index("<table id='verdicts'>") : page.index("</table>")]
    assert table.count("<tr>") == 1 + len(tiny_profile["gates"])
    assert "class='FAIL'>FAIL" in table  # 2.5 s steps fail the 1.82 s gate
    assert "not</b> a faithful reproduction" in page and "no fp16 on CPU" in page
    for fact in ("abc123", "f" * 64, "d" * 64, "2.13.0", "smoke-box-12345678"):
        assert fact in page
    assert page.count("data:image/png;base64,") == 3  # self-contained
    assert "src='http" not in page


def test_run_summary_reports_slowest_rank_median(tmp_path, tiny_profile):
    steps = synthetic_steps(step_time=1.0)
    steps.loc[steps["rank"] == 1, STEP_TIME] *= 2
    summary = summarise_run(steps, 5, spike_rule(tiny_profile))
    assert 1.9 < summary.step_time_median_s < 2.1
    assert summary.ranks == 2 and summary.optimizer_steps == 200
    assert set(summary.peak_memory_per_rank_gib) == {0, 1}


def _page(
    tmp_path,
    tiny_profile,
    steps,
    run_meta=None,
    plan=None,
    events=None,
    ledger=None,
    deviations=(DEVIATION,),
    evaluation=None,
    finished=True,
    variants=None,
    variants_figure=None,
):
    events = no_events() if events is None else events
    verdicts = verdicts_of(
        tiny_profile, steps, events, deviations, plan=plan, run_meta=run_meta, finished=finished
    )
    figures = {
        "loss": tmp_path / "loss.png",
        "step_time": tmp_path / "step.png",
        "memory": tmp_path / "mem.png",
    }
    loss_figure(steps, events, summarised(steps, 5, spike_rule(tiny_profile)), figures["loss"])
    step_time_figure(steps, summarised(steps, 5, spike_rule(tiny_profile)), verdicts, figures["step_time"])
    memory_figure(steps, summarised(steps, 5, spike_rule(tiny_profile)), verdicts, figures["memory"])
    return report_page(
        verdicts=verdicts,
        steps=steps,
        provenance=provenance(),
        deviations=Deviations(deviations=list(deviations)),
        figures=figures,
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
        run_meta=run_meta,
        ledger=ledger,
        plan=plan,
        evaluation=evaluation,
        variants=variants,
        variants_figure=variants_figure,
    )


def _held_as_planned(metrics_dir: Path) -> Path:
    """held_bytes_rank<N>.json of both ranks, each tensor holding exactly what the ledger predicts."""
    run = rendered()
    counts, setup, activations = run_setup(run.run_spec, run.ds_config)
    predicted = model_state_bytes(counts, setup)
    tensor_peak = peak_for_run(run.run_spec, run.ds_config, None).levels["tensor"].predicted_bytes
    for rank in range(setup.ranks):
        HeldBytes(
            rank=rank,
            world_size=setup.ranks,
            parameter_count=counts.total,
            parameter_dtype="float32",
            **predicted,
        ).write(metrics_dir / f"held_bytes_rank{rank}.json")
        # The sampled step's live-tensor peak 10 % above the predicted tensor peak, its buckets at the
        # config's size.
        LiveTensorPeak(
            rank=rank,
            step=201,
            peak_bytes=int(1.1 * tensor_peak),
            at_start_bytes=0,
            buffers_bytes={"reduce_bucket": 4 * setup.reduce_bucket},
            seconds=1.0,
            how="a test's",
        ).write(metrics_dir / f"live_tensors_rank{rank}.json")
    return metrics_dir


def _ledger_table(steps, metrics_dir: Path | None = None, prediction: PeakPrediction | None = None):
    """ledger/ledger_vs_measured.json as compare_ledger makes it: the held tensors of ``metrics_dir``
    against the ledger, and ``prediction`` (the planner's peak for the run by default) against the steps."""
    run = rendered()
    counts, setup, _ = run_setup(run.run_spec, run.ds_config)
    measured = read_measurements(metrics_dir, steps) if metrics_dir is not None else {}
    table = ledger_compare(counts, setup, measured)
    return with_peaks(table, prediction or peak_for_run(run.run_spec, run.ds_config, None), steps, measured)


def test_ledger_section_only_with_a_ledger(tmp_path, tiny_profile):
    steps = synthetic_steps()
    page = _page(tmp_path, tiny_profile, steps)
    assert "Memory ledger: predicted vs measured" not in page and "<table id='ledger'>" not in page
    metrics = _held_as_planned(tmp_path / "metrics")
    ledger = _ledger_table(steps, metrics)
    assert ledger.within_5_percent  # held as planned
    plan = measured_plan()
    assert plan.floor.optimizer_step_floor_s == pytest.approx(0.1)
    page = _page(tmp_path, tiny_profile, steps, plan=plan, ledger=ledger)
    assert "Memory ledger: predicted vs measured" in page
    # ZeRO-3 with both offloads, fp32, 2 ranks: each rank holds 4 B x Phi / 2 of gradients, predicted and
    # held.
    gradients = 4 * ledger.parameters // 2
    assert "<table id='ledger'>" in page and "within 5 %" in page
    assert f"<tr><td>0</td><td>gradients</td><td>{gradients}</td><td>{gradients}</td>" in page
    # Every level of the predicted peak against its measurement, with the error: the live tensors 10 % above
    # the predicted tensor peak (-9.091 %), the resident set against the steps' VmHWM.
    levels = page[page.index("<table id='peak-levels'>") :]
    levels = levels[: levels.index("</table>")]
    assert "<td>0</td><td>tensor</td>" in levels and "<td>-9.091</td>" in levels
    assert (
        "<td>1</td><td>resident_set</td>" in levels
        and "<td>tensor without the gradient buckets</td>" in levels
    )
    assert [r.level for r in ledger.levels if r.rank == 0] == [
        "tensor",
        "tensor without the gradient buckets",
        "resident_set",
    ]
    floor = re.search(r"step_time_over_physical_floor.*?class='(\w+)'", page, re.S)
    assert floor.group(1) == "PASS"  # 0.5 s measured over a 0.1 s floor


def test_crashed_rank_shows_in_the_report(tmp_path, tiny_profile):
    log = (
        '[rank1]: Traceback (most recent call last):\n[rank1]:   File "train.py", line 9, in step\n'
        "[rank1]: RuntimeError: CUDA out of memory\n"
    )
    steps = synthetic_steps()
    meta = run_metadata(steps, parse_launcher_log(log), None, log, 200)
    page = _page(tmp_path, tiny_profile, steps, run_meta=meta, events=parse_launcher_log(log), finished=False)
    assert "<h2>Failures</h2>" in page and "CUDA out of memory" in page and "train.py" in page
    assert re.search(r"ranks_completed.*?class='FAIL'", page, re.S)


def test_a_multinode_run_lists_each_nodes_fingerprint_and_a_single_node_run_none(tmp_path, tiny_profile):
    steps = synthetic_steps()
    nodes = [
        NodeFingerprint(node=i, machine=CPU_FINGERPRINT.model_copy(update={"hostname": f"host-{i}"}))
        for i in (0, 1)
    ]
    meta = run_metadata(steps, parse_launcher_log(""), train_summary(), "", 200, nodes)
    page = _page(tmp_path, tiny_profile, steps, run_meta=meta)
    table = page[page.index("<table id='nodes'>") :]
    assert "<h2>Nodes</h2>" in page and "host-0" in table and "host-1" in table and "Test CPU" in table
    single = run_metadata(steps, parse_launcher_log(""), train_summary(), "", 200, [])
    assert "<h2>Nodes</h2>" not in _page(tmp_path, tiny_profile, steps, run_meta=single)


def test_loss_scale_series_from_overflow_lines():
    from zerogate.report.figures import loss_scale_series

    events = parse_launcher_log(
        "[Rank 0] step=10, skipped=0, lr=[1], mom=[1]\n"
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
    )
    series = loss_scale_series(synthetic_steps(), events)
    assert series.to_dict("records") == [{"step": 10, "loss_scale": 32768.0}]
    assert loss_scale_series(synthetic_steps(), no_events()) is None  # fp32: no scaler, no figure


def spike_rule_of_defaults():
    return SpikeRule.from_settings(StabiliserSettings())


def test_stabiliser_events_are_marked_on_the_loss_figure(tmp_path):
    steps = synthetic_steps()
    events_file = tmp_path / "events.jsonl"
    write_lines(events_file, [StabiliserEvent(step=50, rank=0, kind="loss_spike", value=9.0, action="skip")])
    stabiliser = event_table(stabiliser_events(events_file), "stabiliser")  # what plot_figures passes
    plain, marked = tmp_path / "plain.png", tmp_path / "marked.png"
    loss_figure(steps, no_events(), summarised(steps, 5, spike_rule_of_defaults()), plain)
    loss_figure(steps, no_events(), summarised(steps, 5, spike_rule_of_defaults()), marked, stabiliser)
    assert plain.read_bytes() != marked.read_bytes()


def test_evaluation_before_and_after_is_shown(tmp_path, tiny_profile):
    steps = synthetic_steps()
    assert "id='evaluation'" not in _page(tmp_path, tiny_profile, steps)
    records = [
        EvalRecord(
            step=0,
            phase="before",
            validation_loss=5.25,
            validation_tokens=1200,
            validation_rows=64,
            exact_match_accuracy=0.0,
            exact_match_correct=0,
            exact_match_items=20,
            eval_time_s=1.0,
        ),
        EvalRecord(
            step=250,
            phase="during",
            validation_loss=2.17,
            validation_tokens=1200,
            validation_rows=64,
            eval_time_s=0.5,
        ),
        EvalRecord(
            step=1000,
            phase="after",
            validation_loss=1.04,
            validation_tokens=1200,
            validation_rows=64,
            exact_match_accuracy=0.4,
            exact_match_correct=8,
            exact_match_items=20,
            eval_time_s=1.0,
        ),
    ]
    assert "id='evaluation'" in _page(tmp_path, tiny_profile, steps, evaluation=records)
    shown = section("evaluation", records)
    assert shown.count("<tr>") == 4
    assert "0/20 (0%)" in shown and "8/20 (40%)" in shown and "5.25" in shown and "1.04" in shown


# A deviation whose values are long JSON (a list of module classes, a nested object) must not make the
# table wider than the page, and the run summary must not print per-rank memory as a Python dict.
LONG_DEVIATION = Deviation(
    path="zero_optimization.leaf_module.classes_and_a_rather_long_key_name_without_spaces",
    claim=None,
    rendered=[
        "LlamaDecoderLayer",
        "Qwen2DecoderLayer",
        "MistralDecoderLayer",
        "GPTNeoXLayer",
        "SomeVeryLongModuleNameWithoutAnyBreakOpportunityWhatsoeverInsideIt" * 2,
    ],
    kind="chosen",
    reason="ZeRO-3 leaf modules on the CPU accelerator keep whole decoder layers gathered, which avoids "
    "per-parameter all-gathers of the tiny default model " * 2,
    changes_experiment=False,
)


def test_deviations_table_wraps_long_values_in_fixed_columns(tmp_path, tiny_profile):
    page = _page(tmp_path, tiny_profile, synthetic_steps(), deviations=(DEVIATION, LONG_DEVIATION))
    table = page[page.index("<table id='deviations'") :]
    table = table[: table.index("</table>")]
    assert "class='fixed'" in table.split(">", 1)[0]
    widths = [float(w) for w in re.findall(r"<col style='width:(\d+)%'>", table)]
    assert len(widths) == 6 and sum(widths) == 100  # one width per column, the whole table
    # The style makes fixed tables lay out by those widths and wraps code anywhere inside its cell.
    style = page[page.index("<style>") : page.index("</style>")]
    assert re.search(r"table\.fixed\{table-layout:fixed\}", style)
    assert re.search(r"table\.fixed code\{[^}]*overflow-wrap:anywhere", style)
    assert "SomeVeryLongModuleName" in table and LONG_DEVIATION.reason.strip()[:40] in table  # shown, not cut


def test_run_summary_shows_per_rank_memory_as_a_table_with_units(tmp_path, tiny_profile):
    page = _page(tmp_path, tiny_profile, synthetic_steps(memory_gib=0.6))
    summary = page[page.index("<table id='summary'>") :]
    summary = summary[: summary.index("</table></td></tr>") + len("</table></td></tr>")]
    assert "{0:" not in summary and "{'0'" not in summary  # no Python dict
    row = summary[summary.index("peak memory per rank") :]
    assert "<th>rank</th><th>GiB</th>" in row
    assert "<tr><td>0</td><td class='number'>0.6</td></tr>" in row
    assert "<tr><td>1</td><td class='number'>0.61</td></tr>" in row
    assert re.search(r"median optimizer-step time, slowest rank</th><td>0\.\d+ s</td>", summary)


def test_templates_ship_with_the_package():
    """The report's templates are package data (pyproject), found beside the module that loads them."""
    import tomllib

    from zerogate.report import html

    names = {p.name for p in html.TEMPLATES.iterdir()}
    assert {"base.html.j2", "report.html.j2", "comparison.html.j2", "sections.html.j2", "style.css"} <= names
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["zerogate.report"]
    assert all(any(Path("templates", name).match(pattern) for pattern in patterns) for name in names)


def test_a_run_that_stopped_in_its_warmup_still_gets_its_figures_and_summary(tmp_path, tiny_profile):
    # A crash before the first timed step: no step-time statistics, but the report must still be written.
    steps = synthetic_steps(steps=4)
    stopped = run_metadata(steps, no_events(), None, "", STEPS)  # no summary: the run did not finish
    verdicts = verdicts_of(tiny_profile, steps, finished=False, run_meta=stopped)
    drawn = step_time_figure(
        steps, summarised(steps, 5, spike_rule(tiny_profile)), verdicts, tmp_path / "step.png"
    )
    assert drawn == {"step_time_median(s)": None, "timed_steps": 0}
    summary = summarise_run(steps, 5, spike_rule(tiny_profile))
    assert summary.step_time_median_s is None and summary.timed_steps == 0


def test_report_opens_with_the_seeds_claims_and_shows_the_peak_table(tmp_path, tiny_profile):
    claims = ClaimVerdicts(
        claim="seed",
        source="docs/claim/claim.md",
        claimed_box=ClaimedBox(profile="claim-14b", machine="m.yaml", machine_name="box"),
        machine="here",
        claims=[
            JudgedClaim(
                id="hardware",
                statement="RTX 5070 8 GB",
                kind="hardware",
                on_paper=ClaimVerdict(verdict=DOES_NOT_HOLD, evidence="12.00 GiB", source="description"),
                measured_here=ClaimVerdict(verdict=CANNOT_JUDGE, evidence="—", source="probe", why="no GPU"),
            )
        ],
    )
    # A resident-set peak predicted at 1 GiB, all of it the runtime baseline; rank 0 measures 2 GiB.
    prediction = PeakPrediction(
        scheme="zero3_offload_all",
        ranks=2,
        accelerator="cpu",
        metric=column("peak_rss_gib"),
        what="resident-set peak",
        terms_bytes={"runtime_baseline": 2**30},
        persistent_bytes=2**30,
        transient_bytes=0,
        total_bytes=2**30,
        runtime_baseline=None,
        levels={
            "resident_set": PredictedPeak(
                predicted_bytes=2**30, terms_bytes={"runtime_baseline": 2**30}, what="resident-set peak"
            )
        },
    )
    steps = synthetic_steps(memory_gib=2.0)
    ledger = _ledger_table(steps, prediction=prediction)
    verdicts = verdicts_of(tiny_profile, steps, deviations=())
    page = report_page(
        verdicts=verdicts,
        steps=steps,
        provenance=provenance(),
        deviations=Deviations(deviations=[]),
        figures={},
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
        ledger=ledger,
        claims=claims,
    )
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "The seed's claims" and headings[1] == "Verdicts"
    assert "claim-does-not-hold" in page and "cannot be judged here (no GPU)" in page
    peak = page[page.index("<table id='peak'>") :]
    assert "1.00 GiB (1.07 GB)" in peak and "2.00 GiB (2.15 GB)" in peak and "under-predicted" in peak
    assert "outside ±15 %" in page


def test_the_report_shows_each_timings_interval_and_an_inconclusive_gate(tmp_path, tiny_profile):
    """With the profile's interval settings, every timing statistic of the run summary and every time gate's
    value stand with their interval, what it covers is said once, and an INCONCLUSIVE gate is counted
    apart."""
    steps = synthetic_steps(step_time=0.5, time_noise=0.1, time_correlation=0.5)
    rule = IntervalRule()
    measured = measures.step_time(steps, 5).value
    gates = tuple(
        g.model_copy(update={"threshold": measured}) if g.name == "optimizer_step_time" else g
        for g in settings(tiny_profile).gates
    )
    verdicts = judged_run(
        gates,
        steps,
        no_events(),
        train_summary(),
        rendered().run_spec,
        Deviations(deviations=[DEVIATION]),
        CPU_FINGERPRINT,
        5,
        spike_rule(tiny_profile),
        interval_rule=rule,
    )
    figures = {"loss": tmp_path / "loss.png"}
    loss_figure(steps, no_events(), summarised(steps, 5, spike_rule(tiny_profile)), figures["loss"])
    page = report_page(
        verdicts=verdicts,
        steps=steps,
        provenance=provenance(),
        deviations=Deviations(deviations=[DEVIATION]),
        figures=figures,
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
        interval_rule=rule,
    )
    intervals = timing_intervals([steps], 5, rule)
    summary = page[page.index("<table id='summary'>") :]
    summary = summary[: summary.index("</table>")]
    for found in (
        intervals.step_time_median_s,
        intervals.step_time_p90_s,
        intervals.micro_step_time_median_s,
        intervals.tokens_per_s,
    ):
        assert f"[{found.low:.4g}, {found.high:.4g}]" in summary
    assert summary.count("class='interval'") == 4  # the timing statistics, nothing else
    table = page[page.index("<table id='verdicts'>") :]
    table = table[: table.index("</table>")]
    assert "class='INCONCLUSIVE'>INCONCLUSIVE" in table
    step_gate = verdicts.gate("optimizer_step_time")
    assert f"[{step_gate.interval.low:.4g}, {step_gate.interval.high:.4g}] s" in table
    assert "1 INCONCLUSIVE" in page.split("</p>")[0]
    assert "id='interval-note'" in page and "stationary block bootstrap" in page
    assert "<table id='repeats'>" not in page  # one run


def test_the_report_pools_the_repeats_and_lists_each_with_its_memory(tmp_path, tiny_profile):
    runs = [
        synthetic_steps(step_time=level, memory_gib=0.6 + 0.01 * index, seed=index)
        for index, level in enumerate((0.5, 0.55, 0.6))
    ]
    rule = IntervalRule()
    verdicts = judged_run(
        settings(tiny_profile).gates,
        runs[0],
        no_events(),
        train_summary(),
        rendered().run_spec,
        Deviations(deviations=[DEVIATION]),
        CPU_FINGERPRINT,
        5,
        spike_rule(tiny_profile),
        interval_rule=rule,
        repeat_steps=runs[1:],
    )
    figures = {"loss": tmp_path / "loss.png"}
    loss_figure(runs[0], no_events(), summarised(runs[0], 5, spike_rule(tiny_profile)), figures["loss"])
    page = report_page(
        verdicts=verdicts,
        steps=runs[0],
        provenance=provenance(),
        deviations=Deviations(deviations=[DEVIATION]),
        figures=figures,
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
        interval_rule=rule,
        repeat_steps=runs[1:],
    )
    repeats = page[page.index("<table id='repeats'>") :]
    repeats = repeats[: repeats.index("</table>")]
    assert repeats.count("<tr>") == 1 + 3 and "class='pooled'" in repeats
    pooled = summarise_repeats(runs, 5, spike_rule(tiny_profile), [None] * 3, rule).pooled
    assert f"<b>{pooled.step_time_median_s:.4g}</b>" in repeats
    assert "MLPerf" in page and "The run was trained 3 times" in page
    summary = page[page.index("<table id='summary'>") :]
    assert f"{pooled.step_time_median_s:.4g} s" in summary[: summary.index("</table>")]
    assert verdicts.gate("optimizer_step_time").interval.repeats == 3
