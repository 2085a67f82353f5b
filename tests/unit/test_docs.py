"""What the docs say of the workflow is what the workflow is: docs/pipeline.md lists every rule Snakemake
knows (a table row per rule that does work, the named targets in their paragraph), and nothing else; its
table of the report's first screen names, for each number, the file and field it is read from and the one
function that computes it, as the code has them; and every module or name of the package the docs and the
code's own prose give exists."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest

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


# --- the report's first screen, two hops from the file the report reads ---------------------------------

HOP_ROW = re.compile(
    r"^\| (?P<shown>[^|]+) \| `(?P<file>[^`]+)` \(`(?P<rule>[a-z0-9_]+)`\) \[(?P<contract>\w+)\] \| "
    r"`(?P<field>[^`]+)` \| `(?P<function>zerogate[\w.]+)`",
    flags=re.MULTILINE,
)


def first_screen_rows(text: str) -> list[dict[str, str]]:
    section = text.split("## Where the report's first screen is computed", 1)[1]
    return [match.groupdict() for match in HOP_ROW.finditer(section)]


def contract_class(name: str) -> type:
    for module in pkgutil.iter_modules([str(REPO / "workflow" / "zerogate" / "contracts")]):
        found = getattr(importlib.import_module(f"zerogate.contracts.{module.name}"), name, None)
        if found is not None:
            return found
    raise AssertionError(f"no contract {name}")


def field_type(model: type, dotted: str) -> Any:
    """The type at ``dotted`` (``gates[].measured``) in a pydantic model, by field name or alias."""
    current: Any = model
    for part in dotted.split("."):
        name = part.removesuffix("[]")
        fields = {**current.model_fields, **{f.alias: f for f in current.model_fields.values() if f.alias}}
        assert name in fields, f"{current.__name__} has no field {name}"
        current = fields[name].annotation
        while typing.get_origin(current) in (list, typing.Union, types.UnionType):
            current = next(arg for arg in typing.get_args(current) if arg is not type(None))
    return current


def defined(dotted: str) -> tuple[str, str]:
    """(module, attribute path) of a function named ``zerogate.a.b.f`` or ``zerogate.a.b.Class.method``."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 1, -1):
        module = ".".join(parts[:cut])
        if (REPO / "workflow" / Path(*module.split("."))).with_suffix(".py").is_file():
            target: Any = importlib.import_module(module)
            for attribute in parts[cut:]:
                target = getattr(target, attribute)
            assert callable(target), dotted
            return module, ".".join(parts[cut:])
    raise AssertionError(f"no module in {dotted}")


def reached_modules(script: Path) -> set[str]:
    """The zerogate modules a rule's entry point imports, directly or through the package."""
    from tests.unit.test_code_shape import PACKAGE, import_graph

    graph = import_graph(PACKAGE)
    seen: set[str] = set()
    stack = [
        name
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zerogate")
        for name in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
        if name in graph
    ]
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(graph[module])
    return seen


def rule_script(rule: str) -> Path:
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        # a rule defined only under a condition (the claim's rules: `if CLAIMS:`) is indented
        rule_text = re.search(rf"^( *)rule {rule}:\n((?:\1    .*\n|\n)*)", smk.read_text(), re.M)
        found = rule_text and re.search(r"\"\.\./scripts/(\w+\.py)\"", rule_text.group(2))
        if found:
            return REPO / "workflow" / "scripts" / found.group(1)
    raise AssertionError(f"no script for rule {rule}")


def test_every_number_of_the_reports_first_screen_is_two_hops_from_the_file_the_report_reads():
    rows = first_screen_rows(PIPELINE_DOC.read_text())
    assert len(rows) >= 15
    report_inputs = (REPO / "workflow" / "rules" / "report.smk").read_text().split("rule write_report:")[1]
    for row in rows:
        # hop 1: the report reads the file, whose contract has the field
        assert f"rules.{row['rule']}.output" in report_inputs.split("output:")[0], row
        field_type(contract_class(row["contract"]), row["field"])
        # hop 2: the function exists, and the rule that writes the file reaches it
        module, _ = defined(row["function"])
        assert module in reached_modules(rule_script(row["rule"])), row


def test_the_hop_check_sees_a_field_the_contract_does_not_have():
    with pytest.raises(AssertionError, match="no field"):
        field_type(contract_class("RunSummary"), "statistics.median_loss")
    assert field_type(contract_class("GateVerdicts"), "gates[].interval").__name__ == "GateInterval"
    summarising = reached_modules(rule_script("summarise_run"))
    assert "zerogate.analysis.measures" in summarising and "zerogate.analysis.gates" not in summarising


# --- names of the package in the docs and the code's own prose ----------------------------------------------

# A dotted name of the package: not an attribute (``row.zerogate.x``), not a file (``zerogate.json``).
REFERENCE = re.compile(r"(?<![\w./-])zerogate\.(?!json\b|yaml\b)[a-z_]\w*(?:\.[A-Za-z_]\w*)*")


def unresolved(text: str) -> list[str]:
    """The ``zerogate.<subpackage>...`` names in ``text`` that name no module, or nothing a module defines."""
    missing = []
    for reference in sorted(set(REFERENCE.findall(text))):
        parts = reference.split(".")
        for cut in range(len(parts), 1, -1):
            base = REPO / "workflow" / Path(*parts[:cut])
            path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            if not path.is_file():
                continue
            rest = parts[cut:]
            defines = (
                rf"^\s*(def|class)\s+{rest[0]}\b|^{rest[0]}\b\s*[:=]|import .*\b{rest[0]}\b" if rest else ""
            )
            if rest and not re.search(defines, path.read_text(), re.M):
                missing.append(reference)
            break
        else:
            missing.append(reference)
    return missing


def test_every_module_and_name_the_docs_and_docstrings_give_exists():
    texts = [*(REPO / "docs").glob("*.md"), REPO / "README.md", REPO / "config" / "README.md"]
    texts += [*(REPO / "workflow").rglob("*.py"), *(REPO / "workflow" / "rules").glob("*.smk")]
    texts += [*(REPO / "workflow" / "zerogate" / "report" / "templates").glob("*.j2")]
    missing = {str(path.relative_to(REPO)): unresolved(path.read_text()) for path in texts}
    assert {path: names for path, names in missing.items() if names} == {}


def test_the_name_check_sees_a_name_that_moved():
    assert (
        unresolved("see zerogate.analysis.measures.step_time (and row.zerogate.terms, zerogate.json)") == []
    )
    assert unresolved("zerogate.analysis.measures.no_such_function") == [
        "zerogate.analysis.measures.no_such_function"
    ]
    assert unresolved("zerogate.plan.ledger and zerogate.predict.ledger") == ["zerogate.plan.ledger"]
