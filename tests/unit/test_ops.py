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
