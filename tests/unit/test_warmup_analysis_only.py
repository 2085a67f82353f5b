"""Warm-up exclusion is an analysis setting: editing it changes neither the run spec (which the
checkpoint fingerprint hashes) nor the DeepSpeed config, so it never retrains or discards checkpoints."""

import copy

from tests.unit.helpers import render_profile, settings


def rendered(claim_config, profile, fingerprint):
    """render_deepspeed_config's outputs for ``profile``, from the settings its rule passes (the run's view of
    the training section, ``TrainingSettings.run``)."""
    return render_profile(profile, fingerprint, claim=claim_config, template_file="claim.json")


def test_editing_warmup_steps_excluded_leaves_run_spec_and_ds_config_alone(
    claim_config, smoke_profile, cpu_fingerprint
):
    edited = copy.deepcopy(smoke_profile)
    edited["training"]["warmup_steps_excluded"] += 7
    assert (
        settings(edited).training.warmup_steps_excluded
        == settings(smoke_profile).training.warmup_steps_excluded + 7
    )
    config_a, _, spec_a = rendered(claim_config, smoke_profile, cpu_fingerprint)
    config_b, _, spec_b = rendered(claim_config, edited, cpu_fingerprint)
    assert spec_a == spec_b and config_a == config_b
    assert (
        spec_a.as_json() == spec_b.as_json()
    )  # what deepspeed/run_spec.json holds, and the fingerprint hashes
    assert "warmup_steps_excluded" not in spec_a.as_json()["training"]
    assert "warmup_steps_excluded" not in type(spec_a.training).model_fields
    assert spec_a.training.optimizer_steps == smoke_profile["training"]["optimizer_steps"]
