"""What the docs say of the workflow is what the workflow is: docs/pipeline.md lists every rule Snakemake
knows (a table row per rule that does work, the named targets in their paragraph), and nothing else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIPELINE_DOC = REPO / "docs" / "pipeline.md"


def workflow_rules() -> set[str]:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "--list-rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines() if re.fullmatch(r"[a-z0-9_]+", line.strip())}


def documented(text: str) -> tuple[set[str], set[str]]:
    """(rules with a table row, targets named in the named-targets paragraph) of docs/pipeline.md."""
    rows = set(re.findall(r"^\| `([a-z0-9_]+)`", text, flags=re.MULTILINE))
    paragraph = next(p for p in text.split("\n\n") if p.startswith("The named targets"))
    return rows, set(re.findall(r"`([a-z0-9_]+)`", paragraph))


def test_docs_pipeline_lists_every_rule_and_only_those():
    rules = workflow_rules()
    rows, targets = documented(PIPELINE_DOC.read_text())
    assert rules - rows - targets == set(), "rules the docs do not describe"
    assert (rows | targets) - rules == set(), "the docs describe rules the workflow does not have"


def test_the_check_sees_a_rule_missing_from_the_docs():
    text = PIPELINE_DOC.read_text()
    rows, _ = documented(text)
    victim = sorted(rows)[0]
    without = re.sub(rf"^\| `{victim}`.*$\n", "", text, flags=re.MULTILINE)
    assert victim not in documented(without)[0]
