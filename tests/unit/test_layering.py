"""The package's layering rule, checked on what an import really loads (so transitive imports count too).

The training side (zerogate.train, zerogate.data, zerogate.model) runs inside every DeepSpeed rank: it must
not load the analysis stack (pandas, seaborn, matplotlib). The analysis side (zerogate.analysis,
zerogate.report) runs in light rule jobs and on machines without an accelerator stack: it must not load
torch or deepspeed. Each side's modules are imported in a fresh interpreter, which then reads sys.modules;
an import hook names the zerogate module whose import first pulled a forbidden package in.
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
    "training": (("train", "data", "model"), ("pandas", "seaborn", "matplotlib")),
    "analysis": (("analysis", "report"), ("torch", "deepspeed")),
}

# argv: the forbidden top-level packages (comma-separated), then the modules to import. Prints, as JSON,
# {forbidden package: the innermost zerogate module being imported when it was first loaded}.
PROBE = """
import importlib, json, sys
forbidden = set(sys.argv[1].split(","))
culprits = {}

class Watch:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
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
    return [f"zerogate.{subpackage}"] + [f"zerogate.{subpackage}.{info.name}" for info in pkgutil.iter_modules([str(package)])]


def loaded(forbidden: tuple[str, ...], names: list[str]) -> dict[str, str]:
    """The forbidden packages that importing ``names`` (in a fresh interpreter) loaded, each with its importer."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(WORKFLOW), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(forbidden), *names], capture_output=True, text=True,
                          env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("side", sorted(SIDES))
def test_side_does_not_load_the_other_sides_stack(side):
    subpackages, forbidden = SIDES[side]
    names = [name for subpackage in subpackages for name in modules(subpackage)]
    assert len(names) > len(subpackages)  # the package layout was found
    assert loaded(forbidden, names) == {}


def test_the_probe_sees_what_an_import_loads_and_who_loaded_it():
    # Without this, a probe that always answered {} would pass the cases above (two light imports).
    assert loaded(("pandas", "numpy"), ["zerogate.robust"]) == {"numpy": "zerogate.robust"}
    assert loaded(("pandas",), ["zerogate.report.figures"]) == {"pandas": "zerogate.report.figures"}
