"""Warm-up exclusion is an analysis setting: editing it changes neither the run spec (which the
checkpoint fingerprint hashes) nor the DeepSpeed config, so it never retrains or discards checkpoints."""

import copy

from zerogate.plan.ds_config import render


def test_editing_warmup_steps_excluded_leaves_run_spec_and_ds_config_alone(claim_config, smoke_profile, cpu_fingerprint):
    edited = copy.deepcopy(smoke_profile)
    edited["training"]["warmup_steps_excluded"] += 7
    config_a, _, spec_a = render(claim_config, smoke_profile, cpu_fingerprint, "claim.json")
    config_b, _, spec_b = render(claim_config, edited, cpu_fingerprint, "claim.json")
    assert spec_a == spec_b and config_a == config_b
    assert "warmup_steps_excluded" not in spec_a["training"]
    assert spec_a["training"]["optimizer_steps"] == smoke_profile["training"]["optimizer_steps"]
