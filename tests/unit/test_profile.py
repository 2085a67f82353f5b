import pytest
import yaml

from zerogate.errors import InputError
from zerogate.config.profile import deep_merge, file_defining, load_profile_chain, resolve_profile


def write(directory, name, value):
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(value))


def test_deep_merge_merges_mappings_and_replaces_lists():
    merged = deep_merge({"a": {"x": 1, "y": 2}, "l": [1, 2]}, {"a": {"y": 3}, "l": [9]})
    assert merged == {"a": {"x": 1, "y": 3}, "l": [9]}


def test_smoke_extends_the_default_and_changes_only_its_keys(tiny_profile, smoke_profile):
    assert smoke_profile["training"]["optimizer_steps"] < tiny_profile["training"]["optimizer_steps"]
    assert smoke_profile["model"] == tiny_profile["model"]
    assert smoke_profile["gates"] == tiny_profile["gates"]
    assert "extends" not in smoke_profile


def test_unknown_profile_names_the_asking_file_and_key(tmp_path):
    write(tmp_path, "real", {"description": "x"})
    with pytest.raises(InputError) as error:
        load_profile_chain(tmp_path, "nope", "config/config.yaml", "profile")
    assert str(error.value).startswith("config/config.yaml: profile: unknown profile 'nope'")
    assert "real" in str(error.value) and "\n" not in str(error.value)


def test_extends_cycle_is_refused(tmp_path):
    write(tmp_path, "a", {"extends": "b"})
    write(tmp_path, "b", {"extends": "a"})
    with pytest.raises(InputError, match="cycle"):
        load_profile_chain(tmp_path, "a", "config/config.yaml", "profile")


def test_error_points_at_the_file_that_sets_the_key(tmp_path):
    write(tmp_path, "base", {"training": {"optimizer_steps": 10, "seed": 0}})
    write(tmp_path, "child", {"extends": "base", "training": {"optimizer_steps": -1}})
    chain = load_profile_chain(tmp_path, "child", "config/config.yaml", "profile")
    assert resolve_profile(chain)["training"] == {"optimizer_steps": -1, "seed": 0}
    assert file_defining(chain, ["training", "optimizer_steps"]).name == "child.yaml"
    assert file_defining(chain, ["training", "seed"]).name == "base.yaml"
