import pytest
import yaml

from zerogate.config.profile import deep_merge, file_defining, load_profile_chain, resolve_profile
from zerogate.errors import InputError


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


# ---- a model from its config.json -------------------------------------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _real_chain(tmp_path, child: dict, name: str = "child"):
    """``child`` (extending a real profile) in a directory beside copies of the real profiles."""
    import shutil

    profiles = tmp_path / "config" / "profiles"
    shutil.copytree(REPO / "config" / "profiles", profiles)
    write(profiles, name, child)
    return load_profile_chain(profiles, name, "config/config.yaml", "profile")


def _checked(chain):
    from zerogate.config.profile import check_profile

    return check_profile(resolve_profile(chain), chain, REPO)


def test_a_config_replaces_the_shape_the_parent_states(tmp_path):
    """claim-14b states Qwen2.5-14B's shape keys; a child naming GPT-2 XL's config.json gets GPT-2 XL's
    shape, none of the parent's keys beside it (the shipped claim-gpt2-xl does this)."""
    chain = _real_chain(
        tmp_path,
        {"extends": "claim-14b", "model": {"source": "shape", "config": "config/models/gpt2-xl.json"}},
    )
    model = resolve_profile(chain)["model"]
    assert model == {"source": "shape", "attention": "sdpa", "config": "config/models/gpt2-xl.json"}
    typed = _checked(chain).model
    assert (typed.architecture, typed.hidden_size, typed.num_hidden_layers, typed.num_attention_heads) == (
        "gpt2",
        1600,
        48,
        25,
    )
    assert (typed.intermediate_size, typed.vocab_size, typed.tie_word_embeddings) == (6400, 50257, True)
    assert typed.parameters is None  # claim-14b's parameter count is not GPT-2 XL's
    shipped = load_profile_chain(REPO / "config/profiles", "claim-gpt2-xl", "config/config.yaml", "profile")
    assert _checked(shipped).model == typed


def test_shape_keys_beside_a_config_are_refused_naming_the_file_and_key(tmp_path):
    chain = _real_chain(
        tmp_path,
        {"extends": "claim-14b", "model": {"config": "config/models/gpt2-xl.json", "hidden_size": 1600}},
    )
    with pytest.raises(InputError) as error:
        _checked(chain)
    message = str(error.value)
    assert (
        message.startswith(f"{chain[-1][0]}: model.hidden_size: stated beside model.config")
        and "\n" not in message
    )


def test_a_missing_config_and_a_sequence_beyond_its_positions_are_refused_in_one_line(tmp_path):
    chain = _real_chain(tmp_path, {"extends": "cpu-tiny", "model": {"config": "config/models/no-such.json"}})
    with pytest.raises(InputError) as error:
        _checked(chain)
    assert str(error.value).startswith(f"{chain[-1][0]}: model.config: no such config.json")
    long = _real_chain(
        tmp_path / "long",
        {
            "extends": "cpu-tiny",
            "model": {"config": "config/models/gpt2-xl.json"},
            "dataset": {"seq_len": 2048},
        },
    )
    with pytest.raises(InputError) as error:
        _checked(long)
    assert str(error.value) == (
        f"{long[-1][0]}: dataset.seq_len: 2048 exceeds the 1024 positions of config/models/gpt2-xl.json"
    )


def test_a_profile_given_as_a_yaml_path_extends_the_named_profiles(tmp_path):
    from zerogate.config.profile import profile_name

    file = tmp_path / "suggested" / "claim-14b-checkpointing.yaml"
    file.parent.mkdir()
    file.write_text(yaml.safe_dump({"extends": "claim-14b", "training": {"activation_checkpointing": True}}))
    chain = load_profile_chain(REPO / "config/profiles", str(file), "config/config.yaml", "profile")
    assert [path.name for path, _ in chain] == [
        "cpu-tiny.yaml",
        "claim-14b.yaml",
        "claim-14b-checkpointing.yaml",
    ]
    assert _checked(chain).training.activation_checkpointing is True
    assert profile_name(str(file)) == "claim-14b-checkpointing" and profile_name("cpu-tiny") == "cpu-tiny"
