"""DeepSpeed's ops build into the environment's own directory with its own ninja (zerogate.runtime.ops)."""

import os

from zerogate.runtime.ops import EXTENSIONS_DIR_VARIABLE, build_env


def test_ops_go_to_the_environments_directory_with_its_ninja_first():
    env = build_env({"PATH": "/usr/bin:/bin"}, prefix="/repo/.venv", executable="/repo/.venv/bin/python")
    assert env[EXTENSIONS_DIR_VARIABLE] == "/repo/.venv/torch_extensions"
    assert env["PATH"].split(os.pathsep) == ["/repo/.venv/bin", "/usr/bin", "/bin"]


def test_a_users_build_directory_and_an_already_first_interpreter_are_left_alone():
    env = build_env({"PATH": "/repo/.venv/bin:/usr/bin", EXTENSIONS_DIR_VARIABLE: "/scratch/ops"},
                    prefix="/repo/.venv", executable="/repo/.venv/bin/python")
    assert env == {}


def test_the_ops_build_imports_only_what_set_up_installs_before_it():
    """`make setup` builds the ops while it installs everything but envs/requirements-ops.txt and its
    dependencies: the build must import nothing else, or it could read a package half written."""
    import importlib.metadata as metadata
    import re
    import subprocess
    import sys
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    listed = [line.split("#")[0].strip() for line in
              (Path(__file__).resolve().parents[2] / "envs/requirements-ops.txt").read_text().splitlines()]
    installed_first, todo = set(), [canonicalize_name(name) for name in listed if name]
    while todo:  # the listed packages and their dependencies, as installed here
        name = todo.pop()
        if name in installed_first:
            continue
        installed_first.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))

    # The ops are built in this environment already (make setup): loading them imports what building does.
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "zerogate.runtime.ops"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*([\w.]+)$", done.stderr, re.M)}
    providers = metadata.packages_distributions()
    outside = {module: providers[module] for module in imported if module in providers and module != "zerogate"
               and not {canonicalize_name(d) for d in providers[module]} & installed_first}
    assert not outside, f"the ops build imports {outside}: add them to envs/requirements-ops.txt"
    assert {"torch", "deepspeed"} <= installed_first
