"""validate_planner's and make plan's inputs name every module they import (common.smk's PLANNER_SOURCES),
so a changed planner re-judges the published setups and plans a model again."""

import ast
import re
from pathlib import Path

from tests.unit.test_workflow import snakemake

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "workflow"


def module_file(name: str) -> Path | None:
    """The file of the zerogate module or package ``name`` (None: a name inside a module)."""
    path = WORKFLOW.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported_files(script: Path) -> set[str]:
    """The zerogate modules ``script`` imports, however indirectly (imports inside functions too), as paths
    relative to the repository; package __init__ files left out."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                if name.startswith("zerogate."):
                    parts = name.split(".")
                    todo += [f for i in range(2, len(parts) + 1) if (f := module_file(".".join(parts[:i])))]
    return {str(path.relative_to(REPO)) for path in seen - {script} if path.name != "__init__.py"}


# What validate_planner imports that computes no figure: the entry point's logging, errors, provenance.
PLUMBING = {
    "workflow/zerogate/entry.py",
    "workflow/zerogate/errors.py",
    "workflow/zerogate/provenance.py",
    "workflow/zerogate/hashing.py",
}


def test_validate_planner_reruns_when_any_module_it_imports_changes():
    done = snakemake("-n", "--forcerun", "validate_planner", "--", "validate_planner")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    inputs = re.search(r"^\s+input: (.*)$", done.stdout, re.MULTILINE)
    assert inputs is not None, done.stdout[-3000:]
    listed = {path.strip() for path in inputs[1].split(",")}
    imported = imported_files(WORKFLOW / "scripts" / "validate_planner.py")
    assert "workflow/zerogate/predict/floor.py" in imported  # the closure reaches the planner
    assert imported - PLUMBING - listed == set()
    assert all(Path(REPO / path).is_file() for path in listed)  # no removed folder named


def test_make_plan_plans_again_when_any_module_it_imports_changes():
    config = ("--config", "model=qwen3-8b", "box=2xRTX3090", "host_ram=256GiB")
    done = snakemake("-n", "--forcerun", "plan_model_run", *config, "--", "plan_model")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    inputs = re.search(r"^\s+input: (.*)$", done.stdout, re.MULTILINE)
    assert inputs is not None, done.stdout[-3000:]
    listed = {path.strip() for path in inputs[1].split(",")}
    imported = imported_files(WORKFLOW / "scripts" / "plan_model.py")
    assert "workflow/zerogate/predict/step_time.py" in imported
    assert imported - PLUMBING - listed == set()


def test_predict_step_time_predicts_again_when_any_module_it_imports_changes():
    done = snakemake("-n", "--forcerun", "predict_step_time", "--", "predict_step_time")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    block = done.stdout[done.stdout.index("rule predict_step_time:") :]
    inputs = re.search(r"^\s+input: (.*)$", block, re.MULTILINE)
    assert inputs is not None, block[:3000]
    listed = {path.strip() for path in inputs[1].split(",")}
    imported = imported_files(WORKFLOW / "scripts" / "replan_with_measured_compute.py")
    assert "workflow/zerogate/predict/step_time_copies.py" in imported
    assert imported - PLUMBING - listed == set()
