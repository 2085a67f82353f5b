"""The training settings fill in the stabiliser's and checkpoints' defaults and keeps the profile's values."""

from zerogate.config.settings import training_settings


def test_profile_values_win_and_defaults_fill_the_rest(smoke_profile):
    plan = training_settings(smoke_profile)
    assert plan["checkpoint"]["every_steps"] == 10 and plan["checkpoint"]["keep"] == 2
    assert plan["stabiliser"]["policy"] == smoke_profile["stabiliser"]["policy"]
    assert plan["stabiliser"]["inject"] is None  # fault injection is off unless a profile asks


def test_a_profile_without_the_sections_gets_safe_defaults():
    plan = training_settings({})
    assert plan["stabiliser"]["policy"] == "skip" and plan["checkpoint"]["export_fp32"] is False
