"""The package's shape, read from its source: no import cycle anywhere (imports inside functions included),
imports at the top of a file unless a comment says why, no source file over 500 lines, no function over 80
lines or 8 parameters, save the exceptions listed here, each with its reason. An exception that no longer
applies fails too, so the list stays true."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"
PACKAGE = WORKFLOW / "zerogate"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8

# Files allowed over MAX_FILE_LINES (path under workflow/): reason.
LONG_FILES: dict[str, str] = {}
# Functions allowed over MAX_FUNCTION_LINES or MAX_PARAMETERS ("path:qualified name"): reason.
LONG_FUNCTIONS: dict[str, str] = {
    "zerogate/config/base.py:setting": "a field declaration in the manner of pydantic's Field: one required "
    "description, then optional keyword options (the file rules and pydantic's constraints), each named",
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement names, relative imports resolved against ``package``; a name
    imported from a package may itself be a module, so both are returned."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parent, base] if base else parent)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package under ``root`` -> the package's modules it imports, by any import
    statement: at the top, inside a function, under a condition."""
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(m for m in imported_modules(node, package) if m in paths and m != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_anywhere_in_the_package():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50  # the package was found
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_closed_inside_a_function(tmp_path):
    package = tmp_path / "zerogate"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from zerogate.sub.b import f\n")
    (package / "sub" / "b.py").write_text("def f():\n    from . import a\n")
    (package / "sub" / "c.py").write_text("from zerogate.sub import a\n")
    assert cycles(import_graph(package)) == [["zerogate.sub.a", "zerogate.sub.b"]]


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method with its qualified name (Class.method, outer.inner)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def parameter_count(function: Function) -> int:
    arguments = function.args
    names = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    count = len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)
    return count - (1 if names and names[0].arg in ("self", "cls") else 0)


def sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(WORKFLOW / "scripts").glob("*.py")])


def source_key(path: Path) -> str:
    return str(path.relative_to(WORKFLOW))


def oversized() -> tuple[dict[str, str], dict[str, str]]:
    """(files over the limit -> their size, functions over a limit -> their size), each as text."""
    files, long_functions = {}, {}
    for path in sources():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            files[source_key(path)] = f"{lines} lines"
        for name, function in functions(ast.parse(text)):
            length = function.end_lineno - function.lineno + 1
            parameters = parameter_count(function)
            if length > MAX_FUNCTION_LINES or parameters > MAX_PARAMETERS:
                long_functions[f"{source_key(path)}:{name}"] = f"{length} lines, {parameters} parameters"
    return files, long_functions


def test_no_file_or_function_over_its_limit_but_the_listed_exceptions():
    files, long_functions = oversized()
    assert {k: v for k, v in files.items() if k not in LONG_FILES} == {}
    assert {k: v for k, v in long_functions.items() if k not in LONG_FUNCTIONS} == {}
    # An exception that no longer applies is removed from the list.
    assert set(LONG_FILES) <= set(files) and set(LONG_FUNCTIONS) <= set(long_functions)
    assert all(reason.strip() for reason in [*LONG_FILES.values(), *LONG_FUNCTIONS.values()])


def deferred_imports_without_a_reason(path: Path, root: Path = WORKFLOW) -> list[str]:
    """Import statements inside a function with no comment saying why: on the line above the statement
    (or above the run of import statements it belongs to), or at its end."""
    text = path.read_text()
    lines = text.splitlines()
    deferred = {
        node.lineno: node
        for _, function in functions(ast.parse(text))
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    found = []
    for lineno in sorted(deferred):
        node = deferred[lineno]
        above = lines[lineno - 2].strip() if lineno > 1 else ""
        in_a_run = any(other.end_lineno == lineno - 1 for other in deferred.values())
        if not (above.startswith("#") or "#" in lines[node.end_lineno - 1] or in_a_run):
            found.append(f"{path.relative_to(root)}:{lineno}: {lines[lineno - 1].strip()}")
    return found


def test_imports_inside_functions_say_why():
    missing = [line for path in sources() for line in deferred_imports_without_a_reason(path)]
    assert missing == []


@pytest.mark.parametrize(
    "body, flagged",
    [
        ("def f():\n    import json\n", True),
        ("def f():\n    # the Snakefile imports this module: no torch at its top\n    import torch\n", False),
        ("def f():\n    import torch  # optional\n", False),
        ("def f():\n    # why\n    import torch\n    import deepspeed\n", False),
        ("import json\n\ndef f():\n    return json\n", False),
    ],
)
def test_the_import_check_sees_a_deferred_import_without_a_comment(tmp_path, body, flagged):
    module = tmp_path / "m.py"
    module.write_text(body)
    assert bool(deferred_imports_without_a_reason(module, tmp_path)) is flagged
