import re
from pathlib import Path

import pandas as pd

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import no_events, spike_rule, synthetic_steps
from zerogate.report.figures import loss_figure, memory_figure, step_time_figure
from zerogate.analysis.gates import evaluate
from zerogate.report.html import render_html, run_summary

PROVENANCE = {
    "pipeline_version": "0.1.0",
    "run_id": "smoke-box-12345678",
    "recorded_at": "2026-11-29T00:00:00+00:00",
    "git": {"at_training": {"commit": "abc123", "dirty": False}, "at_report": {"commit": "abc123", "dirty": False}},
    "profile": "smoke",
    "config_hash": "f" * 64,
    "resolved_profile": {},
    "ds_config": {},
    "packages": {"torch": "2.13.0", "deepspeed": "0.19.8"},
    "machine": {k: CPU_FINGERPRINT[k] for k in ("hostname", "platform", "cpu", "ram", "accelerator")},
    "dataset": {"source": "builtin-tasks", "content_sha256": "d" * 64, "splits": {}},
}
DEVIATION = {"path": "fp16.enabled", "claim": True, "rendered": False, "kind": "changed", "reason": "no fp16 on CPU",
             "changes_experiment": True}


def test_report_opens_with_verdicts_and_names_its_provenance(tmp_path, tiny_profile):
    steps = synthetic_steps(step_time=2.5)
    verdicts = evaluate(tiny_profile["gates"], steps, no_events(), {"completed_steps": 200},
                        {"world_size": 2, "training": {"optimizer_steps": 200}}, [DEVIATION], CPU_FINGERPRINT, 5, spike_rule(tiny_profile))
    figures = {"loss": tmp_path / "loss.png", "step_time": tmp_path / "step.png", "memory": tmp_path / "mem.png"}
    loss_figure(steps, no_events(), 5, figures["loss"], spike_rule(tiny_profile))
    step_time_figure(steps, 5, verdicts, figures["step_time"])
    memory_figure(steps, verdicts, figures["memory"])
    for path in figures.values():
        assert path.read_bytes()[:4] == b"\x89PNG"
    page = render_html(verdicts=verdicts, steps=steps, provenance=PROVENANCE, deviations=[DEVIATION],
                       figures=figures, warmup_steps=5, spike_rule=spike_rule(tiny_profile))
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "Verdicts"
    table = page[page.index("<table id='verdicts'>"):page.index("</table>")]
    assert table.count("<tr>") == 1 + len(tiny_profile["gates"])
    assert "class='FAIL'>FAIL" in table  # 2.5 s steps fail the 1.82 s gate
    assert "not</b> a faithful reproduction" in page and "no fp16 on CPU" in page
    for fact in ("abc123", "f" * 64, "d" * 64, "2.13.0", "smoke-box-12345678"):
        assert fact in page
    assert page.count("data:image/png;base64,") == 3  # self-contained
    assert "src='http" not in page


def test_run_summary_reports_slowest_rank_median(tmp_path, tiny_profile):
    steps = synthetic_steps(step_time=1.0)
    steps.loc[steps["rank"] == 1, "step_time(s)"] *= 2
    summary = run_summary(steps, 5, spike_rule(tiny_profile))
    assert 1.9 < summary["step_time_median(s)"] < 2.1
    assert summary["ranks"] == 2 and summary["optimizer_steps"] == 200
    assert set(summary["peak_memory_per_rank(GiB)"]) == {0, 1}


def _page(tmp_path, tiny_profile, steps, run_meta=None, plan=None, events=None, ledger=None, deviations=(DEVIATION,)):
    events = no_events() if events is None else events
    deviations = list(deviations)
    verdicts = evaluate(tiny_profile["gates"], steps, events, {"completed_steps": 200},
                        {"world_size": 2, "training": {"optimizer_steps": 200}}, deviations, CPU_FINGERPRINT, 5, spike_rule(tiny_profile),
                        plan=plan, run_meta=run_meta)
    figures = {"loss": tmp_path / "loss.png", "step_time": tmp_path / "step.png", "memory": tmp_path / "mem.png"}
    loss_figure(steps, events, 5, figures["loss"], spike_rule(tiny_profile))
    step_time_figure(steps, 5, verdicts, figures["step_time"])
    memory_figure(steps, verdicts, figures["memory"])
    return render_html(verdicts=verdicts, steps=steps, provenance=PROVENANCE, deviations=deviations,
                       figures=figures, warmup_steps=5, spike_rule=spike_rule(tiny_profile), run_meta=run_meta,
                       ledger=ledger)


def test_ledger_section_only_with_a_ledger(tmp_path, tiny_profile):
    steps = synthetic_steps()
    assert "Ledger vs measured" not in _page(tmp_path, tiny_profile, steps)
    plan = {"floor": {"optimizer_step(s)": 0.1}}
    ledger = {"scheme": "zero3_offload_optimizer_params", "ranks": 2, "parameters": 128192,
              "max_abs_model_state_error(%)": 0.0, "within_5_percent": True,
              "rows": [{"rank": 0, "term": "gradients", "predicted(bytes)": 256384, "measured(bytes)": 256384,
                        "error(%)": 0.0, "measured_by": "held tensors"}]}
    page = _page(tmp_path, tiny_profile, steps, plan=plan, ledger=ledger)
    assert "<table id='ledger'>" in page and "256384" in page and "within 5 %" in page
    floor = re.search(r"step_time_over_physical_floor.*?class='(\w+)'", page, re.S)
    assert floor.group(1) == "PASS"  # 0.5 s measured over a 0.1 s floor


def test_crashed_rank_shows_in_the_report(tmp_path, tiny_profile):
    from zerogate.analysis.parse import parse_launcher_log, run_metadata
    log = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"train.py\", line 9, in step\n"
           "[rank1]: RuntimeError: CUDA out of memory\n")
    steps = synthetic_steps()
    meta = run_metadata(steps, parse_launcher_log(log), None, log, 200)
    page = _page(tmp_path, tiny_profile, steps, run_meta=meta, events=parse_launcher_log(log))
    assert "<h2>Failures</h2>" in page and "CUDA out of memory" in page and "train.py" in page
    assert re.search(r"ranks_completed.*?class='FAIL'", page, re.S)


def test_a_multinode_run_lists_each_nodes_fingerprint_and_a_single_node_run_none(tmp_path, tiny_profile):
    from tests.conftest import CPU_FINGERPRINT
    steps = synthetic_steps()
    nodes = [{"node": i, **CPU_FINGERPRINT, "hostname": f"host-{i}"} for i in (0, 1)]
    from zerogate.analysis.parse import parse_launcher_log, run_metadata
    meta = run_metadata(steps, parse_launcher_log(""), None, "", 200)
    page = _page(tmp_path, tiny_profile, steps, run_meta={**meta, "nodes": nodes})
    table = page[page.index("<table id='nodes'>"):]
    assert "<h2>Nodes</h2>" in page and "host-0" in table and "host-1" in table and "Test CPU" in table
    assert "<h2>Nodes</h2>" not in _page(tmp_path, tiny_profile, steps, run_meta={**meta, "nodes": []})


def test_loss_scale_series_from_overflow_lines():
    from zerogate.report.figures import loss_scale_series
    from zerogate.analysis.parse import parse_launcher_log
    events = parse_launcher_log("[Rank 0] step=10, skipped=0, lr=[1], mom=[1]\n"
                                "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n")
    series = loss_scale_series(synthetic_steps(), events)
    assert series.to_dict("records") == [{"step": 10, "loss_scale": 32768.0}]
    assert loss_scale_series(synthetic_steps(), no_events()) is None  # fp32: no scaler, no figure


def spike_rule_of_defaults():
    return spike_rule({})


def test_stabiliser_events_are_marked_on_the_loss_figure(tmp_path):
    steps = synthetic_steps()
    stabiliser = pd.DataFrame([{"step": 50, "rank": 0, "kind": "grad_spike", "value": 9.0, "action": "skip"}])
    plain, marked = tmp_path / "plain.png", tmp_path / "marked.png"
    loss_figure(steps, no_events(), 5, plain, spike_rule_of_defaults())
    loss_figure(steps, no_events(), 5, marked, spike_rule_of_defaults(), stabiliser)
    assert plain.read_bytes() != marked.read_bytes()


def test_evaluation_before_and_after_is_shown(tmp_path, tiny_profile):
    steps = synthetic_steps()
    assert "id='evaluation'" not in _page(tmp_path, tiny_profile, steps)
    records = [
        {"step": 0, "phase": "before", "validation/loss": 5.25, "validation/rows": 64,
         "exact_match/accuracy": 0.0, "exact_match/correct": 0, "exact_match/items": 20},
        {"step": 250, "phase": "during", "validation/loss": 2.17, "validation/rows": 64},
        {"step": 1000, "phase": "after", "validation/loss": 1.04, "validation/rows": 64,
         "exact_match/accuracy": 0.4, "exact_match/correct": 8, "exact_match/items": 20},
    ]
    from zerogate.report.html import evaluation_section

    section = evaluation_section(records)
    assert section.count("<tr>") == 4
    assert "0/20 (0%)" in section and "8/20 (40%)" in section and "5.25" in section and "1.04" in section


# Bug 5: a deviation whose values are long JSON (a list of module classes, a nested object) made the
# table wider than the page, and the run summary printed per-rank memory as a Python dict.
LONG_DEVIATION = {
    "path": "zero_optimization.leaf_module.classes_and_a_rather_long_key_name_without_spaces",
    "claim": None,
    "rendered": ["LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer", "GPTNeoXLayer",
                 "SomeVeryLongModuleNameWithoutAnyBreakOpportunityWhatsoeverInsideIt" * 2],
    "kind": "added",
    "reason": "ZeRO-3 leaf modules on the CPU accelerator keep whole decoder layers gathered, which avoids "
              "per-parameter all-gathers of the tiny default model " * 2,
    "changes_experiment": False,
}


def test_deviations_table_wraps_long_values_in_fixed_columns(tmp_path, tiny_profile):
    page = _page(tmp_path, tiny_profile, synthetic_steps(), deviations=(DEVIATION, LONG_DEVIATION))
    table = page[page.index("<table id='deviations'"):]
    table = table[:table.index("</table>")]
    assert "class='fixed'" in table.split(">", 1)[0]
    widths = [float(w) for w in re.findall(r"<col style='width:(\d+)%'>", table)]
    assert len(widths) == 6 and sum(widths) == 100  # one width per column, the whole table
    # The style makes fixed tables lay out by those widths and wraps code anywhere inside its cell.
    style = page[page.index("<style>"):page.index("</style>")]
    assert re.search(r"table\.fixed\{table-layout:fixed\}", style)
    assert re.search(r"table\.fixed code\{[^}]*overflow-wrap:anywhere", style)
    assert "SomeVeryLongModuleName" in table and LONG_DEVIATION["reason"].strip()[:40] in table  # shown, not cut


def test_run_summary_shows_per_rank_memory_as_a_table_with_units(tmp_path, tiny_profile):
    page = _page(tmp_path, tiny_profile, synthetic_steps(memory_gib=0.6))
    summary = page[page.index("<table id='summary'>"):]
    summary = summary[:summary.index("</table></td></tr>") + len("</table></td></tr>")]
    assert "{0:" not in summary and "{'0'" not in summary  # no Python dict
    row = summary[summary.index("peak memory per rank"):]
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
    drawn = step_time_figure(steps, 5, {"gates": []}, tmp_path / "step.png")
    assert drawn == {"step_time_median(s)": None, "timed_steps": 0}
    summary = run_summary(steps, 5, spike_rule(tiny_profile))
    assert summary["step_time_median(s)"] is None and summary["timed_steps"] == 0


def test_report_opens_with_the_seeds_claims_and_shows_the_peak_table(tmp_path, tiny_profile):
    claims = {"claimed_box": {"profile": "claim-14b", "machine": "m.yaml", "machine_name": "box"}, "machine": "here",
              "vocabulary": ["holds", "holds only when", "does not hold", "cannot be judged here"],
              "claims": [{"id": "hardware", "statement": "RTX 5070 8 GB", "kind": "hardware",
                          "on_paper": {"verdict": "does not hold", "text": "does not hold", "evidence": "12.00 GiB",
                                       "source": "description"},
                          "measured_here": {"verdict": "cannot be judged here", "text": "cannot be judged here (no GPU)",
                                            "evidence": "—", "source": "probe"}}]}
    ledger = {"scheme": "zero3_offload_all", "ranks": 2, "parameters": 10, "rows": [],
              "max_abs_model_state_error(%)": None,
              "peak": {"prediction": {"what": "resident-set peak", "metric": "memory/peak_rss(GiB)",
                                      "terms(bytes)": {"runtime_baseline": 2**30}, "persistent(bytes)": 2**30,
                                      "transient(bytes)": 0, "total(bytes)": 2**30},
                       "rows": [{"rank": 0, "predicted(bytes)": 2**30, "measured(bytes)": 2 * 2**30, "error(%)": -50.0,
                                 "off": "the persistent terms (runtime_baseline) are under-predicted"}],
                       "tolerance(%)": 15.0, "max_abs_error(%)": 50.0, "within_tolerance": False}}
    steps = synthetic_steps()
    verdicts = evaluate(tiny_profile["gates"], steps, no_events(), {"completed_steps": 200},
                        {"training": {"optimizer_steps": 200}}, [], CPU_FINGERPRINT, 5, spike_rule(tiny_profile))
    page = render_html(verdicts=verdicts, steps=steps, provenance=PROVENANCE, deviations=[], figures={},
                       warmup_steps=5, spike_rule=spike_rule(tiny_profile), ledger=ledger, claims=claims)
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "The seed's claims" and headings[1] == "Verdicts"
    assert "claim-does-not-hold" in page and "cannot be judged here (no GPU)" in page
    peak = page[page.index("<table id='peak'>"):]
    assert "1.00 GiB (1.07 GB)" in peak and "2.00 GiB (2.15 GB)" in peak and "under-predicted" in peak
    assert "outside ±15 %" in page
