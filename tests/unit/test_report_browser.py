"""The report as a reader's browser shows it: headless Chromium loads the page, the verdict table is there,
and no table is wider than a 1400-px window (a deviations table with long values must not push its reason
column off the right edge)."""

import json
import re

import pytest

from tests.browser import _run, chromium, dump_dom, screenshot
from tests.unit.helpers import synthetic_steps
from tests.unit.test_compare import seven  # noqa: F401  (fixture)
from tests.unit.test_report import DEVIATION, LONG_DEVIATION, _page
from zerogate.report.compare import group_runs, overlay_figure, render_comparison

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
    table = dom[dom.index('<table id="verdicts">'):]
    table = table[:table.index("</table>")]
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
