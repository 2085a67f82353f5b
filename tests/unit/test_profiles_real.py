"""Every shipped profile validates against the schema; the real-hardware profiles say what the claim fixes."""

import json

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from zerogate.config.profile import available_profiles, check_profile, load_profile_chain, resolve_profile

SCHEMA = yaml.safe_load((REPO / "config/schemas/profile.schema.yaml").read_text())


def resolved(name):
    chain = load_profile_chain(REPO / "config/profiles", name, "config/config.yaml", "profile")
    return resolve_profile(chain), chain


@pytest.mark.parametrize("name", available_profiles(REPO / "config/profiles"))
def test_profile_is_valid(name):
    profile, chain = resolved(name)
    jsonschema.validate(profile, SCHEMA)
    check_profile(profile, chain, REPO)


def test_claim_profile_keeps_the_claims_config_and_thresholds():
    claim, _ = resolved("claim-14b")
    tiny, _ = resolved("cpu-tiny")
    assert claim["deepspeed"] == {"template": "config/deepspeed/claim_ds_config.json", "overrides": []}
    assert claim["training"]["optimizer_steps"] == 1000
    published = json.loads((REPO / claim["deepspeed"]["template"]).read_text())
    geometry = claim["training"]["micro_batch_per_rank"] * claim["training"]["gradient_accumulation_steps"] * 2
    assert geometry == published["train_batch_size"] == claim["training"]["train_batch_size"]
    assert claim["gates"] == tiny["gates"]
    assert claim["model"]["source"] == "hub:Qwen/Qwen2.5-14B"


def test_schema_refuses_a_shape_model_without_its_numbers():
    profile, _ = resolved("cpu-tiny")
    del profile["model"]["num_hidden_layers"]
    with pytest.raises(jsonschema.ValidationError, match="num_hidden_layers"):
        jsonschema.validate(profile, SCHEMA)


def test_schema_refuses_a_file_dataset_without_columns():
    profile, _ = resolved("smoke")
    profile["dataset"]["source"] = "data/mine.jsonl"
    with pytest.raises(jsonschema.ValidationError, match="columns"):
        jsonschema.validate(profile, SCHEMA)
