"""Typed settings: defaults and cross-field checks in one place, errors naming the profile file and key."""

import pytest
import yaml

from zerogate.config.model_data import DatasetSettings, ModelSettings, model_settings
from zerogate.config.profile import check_profile, load_profile_chain, resolve_profile
from zerogate.config.settings import ProfileSettings, profile_settings
from zerogate.config.training import (
    CheckpointSettings,
    EvaluationSettings,
    StabiliserSettings,
    TrainingSettings,
    checkpoint_settings,
    stabiliser_settings,
    training_settings,
)
from zerogate.contracts.base import ContractError, plain
from zerogate.contracts.run import TrainSettings
from zerogate.errors import InputError

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def child_of_smoke(tmp_path, override):
    """A profile file ``mine.yaml`` extending the real smoke profile (and its chain) with ``override``."""
    for name in ("cpu-tiny", "smoke"):
        (tmp_path / f"{name}.yaml").write_text((REPO / "config/profiles" / f"{name}.yaml").read_text())
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"extends": "smoke", **override}))
    chain = load_profile_chain(tmp_path, "mine", "config/config.yaml", "profile")
    return resolve_profile(chain), chain


def test_export_without_checkpoints_is_refused_when_the_profile_loads(tmp_path):
    """It would pass the schema, train every step, then crash exporting a checkpoint never saved."""
    profile, chain = child_of_smoke(tmp_path, {"checkpoint": {"every_steps": 0, "export_fp32": True}})
    with pytest.raises(InputError) as error:
        check_profile(profile, chain, REPO)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'mine.yaml'}: checkpoint.export_fp32: ")
    assert "every_steps is 0" in message and "\n" not in message


def test_rollback_without_checkpoints_is_refused_not_turned_into_abort(tmp_path):
    """Policy rollback with every_steps 0 would silently become abort."""
    profile, chain = child_of_smoke(
        tmp_path, {"stabiliser": {"policy": "rollback"}, "checkpoint": {"every_steps": 0}}
    )
    with pytest.raises(InputError) as error:
        check_profile(profile, chain, REPO)
    assert str(error.value).startswith(
        f"{tmp_path / 'mine.yaml'}: stabiliser.policy: rollback needs checkpoints"
    )


def test_the_error_names_the_file_that_set_the_key(tmp_path):
    """mine.yaml sets only every_steps: 0; the rollback policy comes from a parent it extends."""
    (tmp_path / "parent.yaml").write_text(
        yaml.safe_dump({"extends": "smoke", "stabiliser": {"policy": "rollback"}})
    )
    for name in ("cpu-tiny", "smoke"):
        (tmp_path / f"{name}.yaml").write_text((REPO / "config/profiles" / f"{name}.yaml").read_text())
    (tmp_path / "mine.yaml").write_text(
        yaml.safe_dump({"extends": "parent", "checkpoint": {"every_steps": 0}})
    )
    chain = load_profile_chain(tmp_path, "mine", "config/config.yaml", "profile")
    with pytest.raises(InputError) as error:
        check_profile(resolve_profile(chain), chain, REPO)
    assert error.value.file == str(tmp_path / "parent.yaml") and error.value.key == "stabiliser.policy"


def test_rollback_and_export_with_checkpoints_are_accepted(tmp_path):
    profile, chain = child_of_smoke(
        tmp_path,
        {"stabiliser": {"policy": "rollback"}, "checkpoint": {"every_steps": 5, "export_fp32": True}},
    )
    check_profile(profile, chain, REPO)


def _train_settings(stabiliser=StabiliserSettings(), checkpoint=CheckpointSettings()):
    """train/settings.json as write_train_settings builds it from its rule's params (plain settings)."""
    return TrainSettings.of(
        {
            "stabiliser": plain(stabiliser),
            "checkpoint": plain(checkpoint),
            "evaluation": plain(EvaluationSettings()),
        },
        "rule params",
    )


def test_write_train_settings_refuses_the_same_combinations():
    with pytest.raises(ContractError, match="checkpoint.export_fp32: true needs a saved checkpoint"):
        _train_settings(checkpoint=CheckpointSettings(every_steps=0, export_fp32=True))
    with pytest.raises(ContractError, match="stabiliser.policy: rollback needs checkpoints"):
        _train_settings(StabiliserSettings(policy="rollback"), CheckpointSettings(every_steps=0))
    with pytest.raises(ContractError, match="stabiliser.inject.seconds: required for kind slow"):
        _train_settings(StabiliserSettings(inject={"kind": "slow", "rank": 1}))
    # From a profile's settings that skipped the profile's checks, too.
    smoke = profile_settings(
        resolve_profile(
            load_profile_chain(REPO / "config/profiles", "smoke", "config/config.yaml", "profile")
        )
    )
    with pytest.raises(InputError, match="checkpoint.export_fp32"):
        TrainSettings.from_profile(
            smoke.model_copy(update={"checkpoint": CheckpointSettings(every_steps=0, export_fp32=True)})
        )
    # What the profile allows is written and read back unchanged.
    fine = _train_settings(
        StabiliserSettings(policy="rollback"), CheckpointSettings(every_steps=5, export_fp32=True)
    )
    assert TrainSettings.parse(fine.as_json(), "train/settings.json") == fine


def test_every_real_profile_gives_typed_settings():
    for path in sorted((REPO / "config/profiles").glob("*.yaml")):
        chain = load_profile_chain(REPO / "config/profiles", path.stem, "config/config.yaml", "profile")
        settings = profile_settings(resolve_profile(chain))
        assert isinstance(settings, ProfileSettings) and settings.training.optimizer_steps >= 1


def test_defaults_are_filled_and_profile_values_win():
    assert stabiliser_settings(None) == StabiliserSettings()
    assert stabiliser_settings({"policy": "abort"}).policy == "abort"
    assert checkpoint_settings({"keep": 5}) == CheckpointSettings(every_steps=100, keep=5, export_fp32=False)
    assert DatasetSettings(source="x.jsonl", seq_len=64).too_long_rows == "error"
    assert DatasetSettings(source="builtin-tasks", seq_len=64).too_long_rows == "drop"


def test_every_field_documents_itself():
    for cls in (
        TrainingSettings,
        DatasetSettings,
        StabiliserSettings,
        CheckpointSettings,
        EvaluationSettings,
        ModelSettings,
    ):
        for name, f in cls.model_fields.items():
            assert f.description, f"{cls.__name__}.{name} has no doc"


def test_a_bad_value_names_the_dotted_key():
    with pytest.raises(InputError) as error:
        stabiliser_settings({"policy": "retry"}, lambda key: "config/profiles/x.yaml")
    assert str(error.value).startswith("config/profiles/x.yaml: stabiliser.policy: 'retry' is not one of")
    with pytest.raises(InputError, match="checkpoint.every: unknown key"):
        checkpoint_settings({"every": 3})
    with pytest.raises(InputError, match="checkpoint.keep: True is not int"):
        checkpoint_settings({"keep": True})


def test_checkpoint_cadence_and_evaluation_interval():
    every_ten = CheckpointSettings(every_steps=10, export_fp32=True)
    assert [s for s in range(1, 26) if every_ten.due(s, 25)] == [10, 20, 25]
    assert not CheckpointSettings(every_steps=0).due(10, 10)
    assert EvaluationSettings().interval(40) == 10 and EvaluationSettings(every_steps=3).interval(40) == 3


def test_attention_checkpointing_and_the_shape_are_checked_naming_the_key(tmp_path):
    where = lambda key: "config/profiles/x.yaml"  # noqa: E731
    with pytest.raises(InputError) as error:
        model_settings({"hidden_size": 8, "attention": "flash"}, where)
    assert (
        str(error.value) == "config/profiles/x.yaml: model.attention: 'flash' is not one of 'sdpa', 'eager'"
    )
    assert model_settings({"hidden_size": 8}).attention == "sdpa"  # transformers' default
    training = dict(yaml.safe_load((REPO / "config/profiles/cpu-tiny.yaml").read_text())["training"])
    assert training_settings(training).activation_checkpointing is False
    with pytest.raises(InputError, match="training.activation_checkpointing: 'yes' is not bool"):
        training_settings({**training, "activation_checkpointing": "yes"})
    # Without a config: hidden_size, and for a shape-only model its family among the two built from keys.
    profile, chain = child_of_smoke(tmp_path, {"model": {"architecture": "gpt2"}})
    with pytest.raises(InputError) as error:
        check_profile(profile, chain, REPO)
    assert str(error.value).startswith(
        f"{tmp_path / 'mine.yaml'}: model.architecture: 'gpt2' is not one of llama, qwen2"
    )
    assert "model.config" in str(error.value)
