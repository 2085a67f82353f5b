"""The report as a reader's browser shows it: headless Chromium loads the page, the verdict table is there,
and no table is wider than a 1400-px window (a deviations table with long values must not push its reason
column off the right edge)."""

import json
import re

import pytest

from tests.browser import _run, chromium, dump_dom, screenshot
from tests.unit.helpers import spike_rule, synthetic_steps, train_summary
from tests.unit.test_compare import seven  # noqa: F401  (fixture)
from tests.unit.test_report import DEVIATION, LONG_DEVIATION, _page
from zerogate.analysis.compare import group_runs
from zerogate.report.compare import overlay_figure, render_comparison

pytestmark = pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (.ci/run installs it)")

WINDOW = 1400
# Appended to a copy of the page: after layout, write where the page's and each table's right edges are.
MEASURE = """<script>
const edges = {};
for (const table of document.querySelectorAll('table[id]')) {
  const cells = [...table.querySelectorAll('th,td')].map(cell => cell.getBoundingClientRect().right);
  edges[table.id] = Math.max(table.getBoundingClientRect().right, ...cells);
}
const out = document.createElement('pre');
out.id = 'layout';
out.textContent = JSON.stringify({viewport: window.innerWidth, page: document.documentElement.scrollWidth, tables: edges});
document.body.appendChild(out);
</script>"""


def layout(page, tmp_path):
    """Right edges (px) of the page and of every table with an id, in a WINDOW-px-wide Chromium."""
    measured = tmp_path / f"measured-{page.name}"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    done = _run(measured, "--dump-dom", f"--window-size={WINDOW},900")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="layout">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


def test_report_opens_in_headless_chromium_with_the_verdict_table(tmp_path, tiny_profile):
    page = tmp_path / "zerogate-v0.1.0-smoke-box-12345678-2026-11-29.html"
    page.write_text(_page(tmp_path, tiny_profile, synthetic_steps(step_time=2.5)))
    dom = dump_dom(page)
    table = dom[dom.index('<table id="verdicts">') :]
    table = table[: table.index("</table>")]
    assert len(re.findall(r"<tr>", table)) == 1 + len(tiny_profile["gates"])
    assert 'class="FAIL">FAIL' in table and 'class="NOT-MEASURED">NOT MEASURED' in table
    assert dom.count('src="data:image/png;base64,') == 3  # the figures are inside the file
    screenshot(page, tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"


def test_no_table_of_the_report_overflows_a_1400_px_window(tmp_path, tiny_profile):
    page = tmp_path / "report.html"
    page.write_text(_page(tmp_path, tiny_profile, synthetic_steps(), deviations=(DEVIATION, LONG_DEVIATION)))
    edges = layout(page, tmp_path)
    assert edges["viewport"] == WINDOW
    assert {"verdicts", "summary", "deviations", "provenance"} <= set(edges["tables"])
    assert edges["page"] <= WINDOW, edges  # no horizontal scroll
    for table, right in edges["tables"].items():
        assert right <= WINDOW, (table, right)
    screenshot(page, tmp_path / "report.png", size=f"{WINDOW},2400")


def test_the_comparison_fits_a_1400_px_window(tmp_path, seven):  # noqa: F811
    comparison = group_runs(seven)
    figures = {"loss": tmp_path / "loss.png", "step_time": tmp_path / "step.png"}
    overlay_figure(comparison, "loss", "loss", figures["loss"])
    overlay_figure(comparison, "step_time", "s", figures["step_time"])
    page = tmp_path / "comparison.html"
    page.write_text(render_comparison(comparison, figures))
    edges = layout(page, tmp_path)
    assert {"group-1", "group-2", "not-comparable"} <= set(edges["tables"])
    assert edges["page"] <= WINDOW and all(right <= WINDOW for right in edges["tables"].values()), edges


def _choices(tmp_path, tiny_profile):
    """The variants' table as compare_variants makes it (zerogate.analysis.variants.compare on each variant's
    records, with intervals and the planner's prediction for a DeepSpeed one) and its loss figure."""
    from tests.unit.helpers import Trained, variants_table
    from tests.unit.test_report import rendered
    from zerogate.contracts.summary import IntervalRule
    from zerogate.predict.peak import peak_for_run
    from zerogate.report.figures import variant_loss_figure

    runs = {
        name: Trained(
            synthetic_steps(steps=60, step_time=time, memory_gib=memory, seed=seed, noise=noise),
            train_summary(60),
        )
        for name, time, memory, seed, noise in (
            ("zero2", 0.4, 0.9, 0, 0.0),
            ("zero3", 0.6, 0.5, 0, 0.0),
            ("fsdp2", 0.5, 0.55, 0, 0.0),
            ("zero1", 0.45, 0.95, 0, 0.0),
        )
    }
    run = rendered()
    table = variants_table(
        runs,
        warmup_steps=5,
        spike_rule=spike_rule(tiny_profile),
        expected_steps=60,
        interval_rule=IntervalRule(resamples=200),
        predictions={"zero3": peak_for_run(run.run_spec, run.ds_config, None)},
        not_run=["hf-trainer"],
        accelerator="cpu",
    )
    figure = tmp_path / "variants.png"
    shown = variant_loss_figure({name: r.steps for name, r in runs.items()}, figure)
    return table, figure, shown


def test_the_choices_section_shows_every_variant_the_fastest_and_the_smallest_in_chromium(
    tmp_path, tiny_profile
):
    table, figure, shown = _choices(tmp_path, tiny_profile)
    assert (table.fastest, table.smallest) == ("zero2", "zero3")
    page = tmp_path / "report.html"
    page.write_text(_page(tmp_path, tiny_profile, synthetic_steps(), variants=table, variants_figure=figure))
    dom = dump_dom(page)
    section = dom[dom.index('<table id="choices">') :]
    section = section[: section.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)
    assert len(rows) == 1 + 5  # header, zero2, zero3, fsdp2, zero1, hf-trainer
    by_name = {re.search(r"<b>([\w-]+)</b>", row).group(1): row for row in rows[1:]}
    assert set(by_name) == {"zero1", "zero2", "zero3", "fsdp2", "hf-trainer"}
    assert "num_processes=1" in by_name["hf-trainer"] and "not run" in by_name["hf-trainer"]
    zero3 = table.rows[1]
    assert f"{zero3.statistics.step_time_median_s:.4g}" in by_name["zero3"]
    assert f"{zero3.predicted_peak_gib:.4g}" in by_name["zero3"] and "not predicted" in by_name["fsdp2"]
    assert 'class="interval"' in by_name["fsdp2"]  # the step time's interval beside it
    assert '<b id="fastest">zero2</b>' in dom and '<b id="smallest">zero3</b>' in dom
    agreement = dom[dom.index('<table id="agreement">') :]
    agreement = agreement[: agreement.index("</table>")]
    assert "fsdp2" in agreement and "within the tolerance" in agreement  # identical synthetic curves
    assert dom.count('src="data:image/png;base64,') == 4  # the run's three figures and the variants' losses
    assert set(shown["final_loss"]) == {"zero1", "zero2", "zero3", "fsdp2"}
    edges = layout(page, tmp_path)
    assert edges["tables"]["choices"] <= WINDOW and edges["page"] <= WINDOW, edges
    screenshot(page, tmp_path / "choices.png", size=f"{WINDOW},3200")


def test_a_report_without_variants_has_no_choices_section(tmp_path, tiny_profile):
    page = tmp_path / "report.html"
    page.write_text(_page(tmp_path, tiny_profile, synthetic_steps()))
    assert "id='choices'" not in page.read_text() and "Choices" not in page.read_text()
