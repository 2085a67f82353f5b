"""The package's layering rules, checked on what an import really loads (so transitive imports count too).

Layers, from the bottom: zerogate.contracts (the files' types, with zerogate.config) -> zerogate.runtime
(process launch, nodes, the one-rank world, the probe, the one training loop) -> zerogate.render (the
DeepSpeed config) -> zerogate.predict (memory, communication and time before the run) beside zerogate.train
(neither imports the other) -> zerogate.analysis -> zerogate.report.

- The training side (zerogate.train, zerogate.data, zerogate.model, zerogate.runtime) runs inside every
  DeepSpeed rank: it must not load the analysis stack (pandas, seaborn, matplotlib).
- The analysis side (zerogate.analysis, zerogate.report) runs in light rule jobs and on machines without an
  accelerator stack: it must not load torch or deepspeed.
- The contracts are read by both sides: neither torch nor pandas.
- zerogate.render never loads zerogate.predict; neither loads zerogate.train, zerogate.train loads neither,
  zerogate.runtime loads none of them, and nothing below zerogate.analysis loads it or zerogate.report.

Each side's modules are imported in a fresh interpreter, which then reads sys.modules; an import hook
names the zerogate module whose import first pulled a forbidden package in.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"

SIDES = {
    "training": (("train", "data", "model", "runtime"), ("pandas", "seaborn", "matplotlib")),
    "analysis": (("analysis", "report"), ("torch", "deepspeed")),
    "contracts": (("contracts",), ("torch", "deepspeed", "pandas")),
}
# The zerogate layers each layer must not load (zerogate.<name> as the forbidden "package").
LAYERS = {
    "render": ("predict", "train", "analysis", "report"),
    "predict": ("train", "analysis", "report"),
    "train": ("render", "predict", "analysis", "report"),
    "runtime": ("render", "predict", "train", "analysis", "report"),
    "contracts": ("render", "predict", "train", "runtime", "analysis", "report", "model", "data"),
    "config": ("render", "predict", "train", "runtime", "analysis", "report"),
    "analysis": ("report", "train"),
}

# argv: the forbidden top-level packages (comma-separated), then the modules to import. Prints, as JSON,
# {forbidden package: the innermost zerogate module being imported when it was first loaded}.
PROBE = """
import importlib, json, sys
forbidden = set(sys.argv[1].split(","))
culprits = {}

def package(name):
    # The unit a module belongs to: its top-level package, or zerogate.<layer>.
    parts = name.split(".")
    return parts[0] if parts[0] != "zerogate" or len(parts) < 2 else "zerogate." + parts[1]

class Watch:
    def find_spec(self, name, path=None, target=None):
        top = package(name)
        if top in forbidden and top not in culprits:
            frame = sys._getframe(1)
            while frame is not None and not frame.f_globals.get("__name__", "").startswith("zerogate"):
                frame = frame.f_back
            culprits[top] = frame.f_globals["__name__"] if frame is not None else "?"
        return None

sys.meta_path.insert(0, Watch())
for module in sys.argv[2:]:
    importlib.import_module(module)
print(json.dumps({top: culprits.get(top, "?") for top in sorted(forbidden) if top in sys.modules}))
"""


def modules(subpackage: str) -> list[str]:
    package = WORKFLOW / "zerogate" / subpackage
    return [f"zerogate.{subpackage}"] + [
        f"zerogate.{subpackage}.{info.name}" for info in pkgutil.iter_modules([str(package)])
    ]


def loaded(forbidden: tuple[str, ...], names: list[str]) -> dict[str, str]:
    """The forbidden packages that importing ``names`` (in a fresh interpreter) loaded, each with its
    importer."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(WORKFLOW), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(forbidden), *names],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("side", sorted(SIDES))
def test_side_does_not_load_the_other_sides_stack(side):
    subpackages, forbidden = SIDES[side]
    names = [name for subpackage in subpackages for name in modules(subpackage)]
    assert len(names) > len(subpackages)  # the package layout was found
    assert loaded(forbidden, names) == {}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_never_loads_the_layers_above_or_beside_it(layer):
    forbidden = tuple(f"zerogate.{name}" for name in LAYERS[layer])
    assert loaded(forbidden, modules(layer)) == {}


def test_the_probe_sees_what_an_import_loads_and_who_loaded_it():
    # Without this, a probe that always answered {} would pass the cases above (two light imports).
    assert loaded(("pandas", "numpy"), ["zerogate.robust"]) == {"numpy": "zerogate.robust"}
    assert loaded(("pandas",), ["zerogate.report.figures"]) == {"pandas": "zerogate.report.figures"}
    assert loaded(("zerogate.analysis",), ["zerogate.report.figures"])["zerogate.analysis"].startswith(
        "zerogate.report"
    )


def imported_names(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names, at the top or inside a function."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_import_statement_crosses_a_layer_even_inside_a_function(layer):
    # Deferred imports do not load at import time, so the probe above cannot see them; the statements can.
    forbidden = tuple(f"zerogate.{name}" for name in LAYERS[layer])
    crossing = {
        f"{path.relative_to(WORKFLOW)}: {name}"
        for path in sorted((WORKFLOW / "zerogate" / layer).glob("*.py"))
        for name in imported_names(path)
        if name.startswith(forbidden)
    }
    assert not crossing


def test_the_import_scan_sees_a_deferred_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from zerogate.train.loop import main\n")
    assert imported_names(module) == {"zerogate.train.loop"}
