"""DeepSpeed's ops build into the environment's own directory with its own ninja (zerogate.runtime.ops)."""

import os

import pytest

from zerogate.runtime.ops import ARCH_LIST_VARIABLE, EXTENSIONS_DIR_VARIABLE, build_env, plain_arch_list


def test_ops_go_to_the_environments_directory_with_its_ninja_first():
    env = build_env({"PATH": "/usr/bin:/bin"}, prefix="/repo/.venv", executable="/repo/.venv/bin/python")
    assert env[EXTENSIONS_DIR_VARIABLE] == "/repo/.venv/torch_extensions"
    assert env["PATH"].split(os.pathsep) == ["/repo/.venv/bin", "/usr/bin", "/bin"]


def test_a_users_build_directory_and_an_already_first_interpreter_are_left_alone():
    env = build_env(
        {"PATH": "/repo/.venv/bin:/usr/bin", EXTENSIONS_DIR_VARIABLE: "/scratch/ops"},
        prefix="/repo/.venv",
        executable="/repo/.venv/bin/python",
    )
    assert env == {}


def test_the_ops_build_imports_only_what_set_up_installs_before_it():
    """`make setup` builds the ops while it installs everything but envs/requirements-ops.txt and its
    dependencies: the build must import nothing else, or it could read a package half written."""
    import importlib.metadata as metadata
    import json
    import subprocess
    import sys
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    # The environment's own packages (not the copies some of them vendor, which setuptools puts on sys.path).
    site_packages = Path(metadata.distribution("torch").locate_file("")).resolve()
    installed = {
        canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site_packages)])
    }
    listed = [
        line.split("#")[0].strip()
        for line in (Path(__file__).resolve().parents[2] / "envs/requirements-ops.txt")
        .read_text()
        .splitlines()
    ]
    installed_first, todo = set(), [canonicalize_name(name) for name in listed if name]
    while todo:  # the listed packages and their dependencies, as installed here
        name = todo.pop()
        if name in installed_first:
            continue
        installed_first.add(name)
        for text in installed[name].requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))

    # The ops are built in this environment already (make setup): loading them imports what building does.
    # Each top-level module is traced to the installed package whose files hold it (a vendored copy belongs
    # to the package it ships in).
    report = (
        "import json, sys; from zerogate.runtime.ops import main; main(); print(json.dumps("
        "{n: getattr(m, '__file__', None) for n, m in list(sys.modules.items()) if '.' not in n}))"
    )
    done = subprocess.run([sys.executable, "-c", report], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    module_files = json.loads(done.stdout.splitlines()[-1])
    owner = {Path(d.locate_file(f)).resolve(): name for name, d in installed.items() for f in d.files or ()}
    outside = {}
    for module, file in module_files.items():
        if file is None or not Path(file).resolve().is_relative_to(site_packages):
            continue  # the standard library, or this package (workflow/)
        package = owner.get(Path(file).resolve())
        if package not in installed_first:
            outside[module] = package
    assert not outside, f"the ops build imports {outside}: add them to envs/requirements-ops.txt"
    assert {"torch", "deepspeed"} <= installed_first


def test_deepspeed_asks_py_cpuinfo_once_per_process_once_its_answer_is_kept(monkeypatch):
    import cpuinfo
    import cpuinfo.cpuinfo as implementation
    from deepspeed.ops.op_builder.cpu import CPUAdamBuilder

    from zerogate.runtime.ops import keep_cpu_info

    asked = []
    answer = implementation.get_cpu_info_json

    def counted() -> str:
        asked.append(1)
        return answer()

    # py-cpuinfo's own function, also where an earlier test of this session kept an answer; put back after.
    monkeypatch.setattr(
        cpuinfo, "get_cpu_info", getattr(cpuinfo.get_cpu_info, "__wrapped__", cpuinfo.get_cpu_info)
    )
    monkeypatch.setattr(implementation, "get_cpu_info_json", counted)
    builder = CPUAdamBuilder()
    builder.cpu_arch(), builder.simd_width()
    assert len(asked) == 2  # one interpreter started per question
    keep_cpu_info()
    keep_cpu_info()  # a second call keeps the same answer
    flags = builder.cpu_arch(), builder.simd_width(), builder.cpu_arch()
    assert len(asked) == 3 and flags[0] == flags[2] == "-march=native"
    assert (
        cpuinfo.get_cpu_info() == cpuinfo.get_cpu_info()
        and cpuinfo.get_cpu_info() is not cpuinfo.get_cpu_info()
    )


def test_an_arch_specific_target_reaches_deepspeed_as_its_plain_one(monkeypatch):
    """A GPU image's TORCH_CUDA_ARCH_LIST="9.0a" stops DeepSpeed's CUDA op builds (seen on the lent H200);
    build_env hands DeepSpeed the plain target instead, which DeepSpeed's own reader accepts."""
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    monkeypatch.setenv(ARCH_LIST_VARIABLE, "9.0a")
    with pytest.raises(ValueError, match="0a"):
        FusedAdamBuilder().compute_capability_args()
    monkeypatch.setenv(ARCH_LIST_VARIABLE, build_env()[ARCH_LIST_VARIABLE])
    assert FusedAdamBuilder().compute_capability_args() == ["-gencode=arch=compute_90,code=sm_90"]


def test_arch_lists_without_arch_specific_targets_are_left_alone():
    assert plain_arch_list("8.6 9.0a+PTX;10.0f;9.0") == "8.6;9.0+PTX;10.0;9.0"
    assert ARCH_LIST_VARIABLE not in build_env({"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"})
    assert ARCH_LIST_VARIABLE not in build_env({})
