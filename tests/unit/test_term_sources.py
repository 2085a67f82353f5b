"""Every term and every numeric constant of the memory predictor names a source a reader can open: a file of
the installed DeepSpeed, torch or transformers (that exists there), a published measurement with its link,
or the word "assumed" with the reason; never zerogate's own tests or fixtures. The terms are walked from the
predictor's modules (every ``*_SOURCES`` mapping), the constants from their source (every module-level
upper-case name bound to a number), not from a hand list."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import os
import re
from pathlib import Path

from zerogate.predict.ledger import TERM_ORDER, TERM_SOURCES

# The memory predictor's modules (the step-time modules are another ledger's).
MEMORY_MODULES = (
    "activation_figures",
    "activations",
    "cuda_terms",
    "estimates",
    "fetch_trace",
    "fit",
    "fsdp2_terms",
    "host_memory",
    "ledger",
    "levels",
    "peak",
    "phases",
    "setup",
    "trace",
    "zero_buffers",
    "zero_states",
    "zero_terms",
)
PACKAGES = ("deepspeed", "torch", "transformers")
FILE = re.compile(r"[\w/]*\w\.(?:py|h|cpp)\b")
URL = re.compile(r"https?://\S+")
OWN = re.compile(r"tests/|fixture", re.IGNORECASE)
# A figure the pipeline measures on the machine a prediction is for, each run (not a constant): it names the
# zerogate.runtime module that measures it.
AT_RUN_TIME = re.compile(r"\(zerogate\.runtime\.(\w+)\).*measured at run time")


@functools.cache
def package_files() -> dict[str, list[str]]:
    """Every source file of the three packages, by its name, as paths relative to the site-packages."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        root = Path(importlib.util.find_spec(package).origin).parent
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith((".py", ".h", ".cpp")):
                    found.setdefault(name, []).append(str(Path(folder, name).relative_to(root.parent)))
    return found


def opens_in_a_package(reference: str) -> bool:
    """Whether ``reference`` (``stage3.py``, ``deepspeed/runtime/zero/stage3.py``) names a file that exists
    in the installed DeepSpeed, torch or transformers."""
    name = reference.rsplit("/", 1)[-1]
    return any(path.endswith(reference) or reference.endswith(path) for path in package_files().get(name, []))


def source_kinds(text: str) -> list[str]:
    """The kinds of openable source ``text`` names."""
    kinds = []
    if any(opens_in_a_package(ref) for ref in FILE.findall(text)):
        kinds.append("package file")
    if URL.search(text):
        kinds.append("published")
    if re.search(r"\bassumed\b", text, re.IGNORECASE):
        kinds.append("assumed")
    runtime = AT_RUN_TIME.search(text)
    if runtime and importlib.util.find_spec(f"zerogate.runtime.{runtime.group(1)}"):
        kinds.append("measured at run time")
    return kinds


def test_the_classifier_tells_the_kinds_apart():
    assert source_kinds("stage3.py _optimizer_step") == ["package file"]
    assert source_kinds("deepspeed/runtime/zero/no_such_file.py") == []
    assert source_kinds("torch/optim/adam.py _multi_tensor_adam") == ["package file"]
    assert source_kinds("1.6 GB (https://github.com/NVIDIA/nccl/issues/864)") == ["published"]
    assert source_kinds("assumed: no GPU here") == ["assumed"]
    assert source_kinds("measured here (docs/measurements.md)") == []
    assert source_kinds("(zerogate.runtime.baseline): measured at run time") == ["measured at run time"]
    assert source_kinds("(zerogate.runtime.nothing): measured at run time") == []


def sources_mappings() -> dict[str, dict[str, str]]:
    """Every ``*_SOURCES`` mapping of the memory modules, by module.name."""
    found = {}
    for module_name in MEMORY_MODULES:
        module = importlib.import_module(f"zerogate.predict.{module_name}")
        for name, value in vars(module).items():
            if name.endswith("_SOURCES") and isinstance(value, dict):
                found[f"{module_name}.{name}"] = value
    return found


def test_every_term_names_an_openable_source_and_none_cites_our_own_tests():
    mappings = sources_mappings()
    assert mappings, "no *_SOURCES mapping found"
    unsourced, own = [], []
    for where, mapping in mappings.items():
        for term, text in mapping.items():
            if not source_kinds(text):
                unsourced.append(f"{where}[{term}]")
            if OWN.search(text):
                own.append(f"{where}[{term}]")
    assert not unsourced, (
        f"terms without a DeepSpeed/torch/transformers file, a link or 'assumed': {unsourced}"
    )
    assert not own, f"terms citing zerogate's tests or fixtures: {own}"


def test_every_ledger_term_has_a_source():
    assert set(TERM_SOURCES) == set(TERM_ORDER)


def _is_number(node: ast.AST) -> bool:
    """Whether an expression holds a numeric literal other than 0 and 1 (a figure, not a flag)."""
    return any(
        isinstance(n, ast.Constant)
        and isinstance(n.value, int | float)
        and not isinstance(n.value, bool)
        and n.value not in (0, 1)
        for n in ast.walk(node)
    )


def constant_comments(path: Path) -> dict[str, str]:
    """Each module-level upper-case constant bound to a number, with the comment above it (its contiguous
    ``#`` lines, and those above any constant it is grouped with) and on its lines."""
    text = path.read_text()
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
        if not names or node.value is None or not _is_number(node.value):
            continue
        comment = [lines[i] for i in range(node.lineno - 1, node.end_lineno) if "#" in lines[i]]
        above = node.lineno - 2
        while above >= 0 and lines[above].lstrip().startswith("#"):
            comment.insert(0, lines[above])
            above -= 1
        for name in names:
            found[name] = "\n".join(comment)
    return found


def test_every_numeric_constant_of_the_memory_predictor_names_its_source():
    root = Path(importlib.import_module("zerogate.predict").__file__).parent
    unsourced, own, seen = [], [], 0
    for module_name in MEMORY_MODULES:
        for name, comment in constant_comments(root / f"{module_name}.py").items():
            seen += 1
            if not source_kinds(comment):
                unsourced.append(f"{module_name}.{name}")
            if OWN.search(comment):
                own.append(f"{module_name}.{name}")
    assert seen > 5
    assert not unsourced, (
        f"constants without a DeepSpeed/torch/transformers file, a link or 'assumed': {unsourced}"
    )
    assert not own, f"constants citing zerogate's tests or fixtures: {own}"
