"""The report as a reader's browser shows it: headless Chromium loads the page, the verdict table is there."""

import re

import pytest

from tests.browser import chromium, dump_dom, screenshot
from tests.unit.helpers import synthetic_steps
from tests.unit.test_report import _page

pytestmark = pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium (.ci/run installs it)")


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
