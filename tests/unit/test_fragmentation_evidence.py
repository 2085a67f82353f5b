"""The published out-of-memory messages of ZeRO and FSDP runs (docs/data/published_oom_fragmentation.csv)
as evidence on the caching allocator's fragmentation term
(zerogate.predict.cuda_terms.FRAGMENTATION_OF_RESERVED): each row's share is what its quoted message says,
no row is a row of the validation table, and docs/measurements.md states what the file gives against the
term's range."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

from zerogate.predict.cuda_terms import FRAGMENTATION_OF_RESERVED

REPO = Path(__file__).resolve().parents[2]
EVIDENCE = REPO / "docs/data/published_oom_fragmentation.csv"
SETUPS = REPO / "config/published_setups/setups.yaml"
UNITS = {"MiB": 1 / 1024, "GiB": 1.0}
FIGURE = r"([\d.]+) (MiB|GiB)"
# torch's two message formats (c10/cuda/CUDACachingAllocator.cpp): since 2.1 "A is allocated by PyTorch, and B
# is reserved by PyTorch but unallocated"; before, "A already allocated; ... R reserved in total by PyTorch".
NEW = re.compile(rf"{FIGURE} is allocated by PyTorch, and {FIGURE} is reserved by PyTorch but unallocated")
OLD_ALLOCATED = re.compile(rf"{FIGURE} already allocated")
OLD_RESERVED = re.compile(rf"{FIGURE} reserved in tot")


def gib(match: re.Match[str], first: int = 1) -> float:
    return float(match.group(first)) * UNITS[match.group(first + 1)]


def quoted_share(quote: str) -> float:
    """The share of the reserved memory that no tensor holds, (reserved - allocated) / reserved, read from an
    out-of-memory message in either of torch's formats."""
    new = NEW.search(quote)
    if new:
        allocated, unallocated = gib(new, 1), gib(new, 3)
        return unallocated / (allocated + unallocated)
    allocated, reserved = OLD_ALLOCATED.search(quote), OLD_RESERVED.search(quote)
    assert allocated and reserved, f"no allocator figures in {quote!r}"
    return (gib(reserved) - gib(allocated)) / gib(reserved)


def rows() -> list[dict[str, str]]:
    with EVIDENCE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def issue_key(url: str) -> str:
    """owner-free, case- and dash-free repository name and issue number: the same issue under a renamed
    owner or repository (microsoft/DeepSpeed, LLaMA-Factory) is one key."""
    match = re.search(r"github\.com/[^/]+/([^/]+)/issues/(\d+)", url)
    assert match, url
    return f"{match.group(1).lower().replace('-', '')}#{match.group(2)}"


def training_step_runs() -> list[float]:
    """Each run's share (the largest of its ranks' messages), runs that failed inside a training step only."""
    by_run: dict[str, float] = {}
    for row in rows():
        if row["phase"] == "training step":
            by_run[row["run"]] = max(by_run.get(row["run"], 0.0), float(row["share"]))
    return sorted(by_run.values())


def test_each_share_is_what_its_quoted_message_says():
    for row in rows():
        assert abs(quoted_share(row["quote"]) - float(row["share"])) < 0.002, row["url"]


def test_no_message_comes_from_a_row_the_planner_is_judged_on():
    table = {
        issue_key(url) for url in re.findall(r"https://github\.com/[^\s\"')]+/issues/\d+", SETUPS.read_text())
    }
    assert table, "the validation table names no issue"
    assert not {issue_key(row["url"]) for row in rows()} & table


def test_measurements_states_what_the_file_gives_against_the_terms_range():
    low, _, high = FRAGMENTATION_OF_RESERVED
    shares = training_step_runs()
    inside = sum(low <= share <= high for share in shares)
    median = 100 * statistics.median(shares)
    stated = (
        f"{len(shares)} runs that failed inside a training step: median {median:.1f} %, "
        f"{100 * min(shares):.1f}-{100 * max(shares):.1f} %; {inside} of {len(shares)} inside the term's "
        f"{100 * low:.0f}-{100 * high:.0f} %"
    )
    text = " ".join((REPO / "docs/measurements.md").read_text().split())
    assert stated in text, stated
