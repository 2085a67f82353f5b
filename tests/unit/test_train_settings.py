"""The training settings (train/settings.json) fill in the stabiliser's, checkpoints' and evaluation's
defaults and keep the profile's values."""

from tests.unit.helpers import settings
from zerogate.contracts.run import TrainSettings


def test_profile_values_win_and_defaults_fill_the_rest(smoke_profile):
    train = TrainSettings.from_profile(settings(smoke_profile))
    assert train.checkpoint.every_steps == 10 and train.checkpoint.keep == 2
    assert train.stabiliser.policy == smoke_profile["stabiliser"]["policy"]
    assert train.stabiliser.inject is None  # fault injection is off unless a profile asks
    assert TrainSettings.parse(train.as_json(), "train/settings.json") == train


def test_a_profile_without_the_sections_gets_safe_defaults(smoke_profile):
    bare = {k: v for k, v in smoke_profile.items() if k not in ("stabiliser", "checkpoint", "evaluation")}
    train = TrainSettings.from_profile(settings(bare))
    assert train.stabiliser.policy == "skip" and train.checkpoint.export_fp32 is False
    assert train.checkpoint.every_steps == 100 and train.evaluation.every_steps == 0
