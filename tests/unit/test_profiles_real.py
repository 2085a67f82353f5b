"""Every shipped profile validates against the schema; the real-hardware profiles say what the claim fixes."""

import json

import jsonschema
import pytest

from tests.conftest import REPO
from zerogate.config.profile import available_profiles, check_profile, load_profile_chain, resolve_profile

SCHEMA = json.loads((REPO / "config/schemas/profile.schema.json").read_text())


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
    geometry = (
        claim["training"]["micro_batch_per_rank"] * claim["training"]["gradient_accumulation_steps"] * 2
    )
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


def test_schema_refuses_a_learning_rate_warm_up_of_zero_in_one_line_naming_the_key():
    """DeepSpeed's WarmupCosineLR raises on warmup_num_steps 0 only when the engine is built, after the
    dataset and the plan: the schema refuses it before any job runs."""
    from zerogate.config.validation import to_input_error

    profile, _ = resolved("smoke")
    profile["training"]["lr_warmup_steps"] = 0
    with pytest.raises(jsonschema.ValidationError) as error:
        jsonschema.validate(profile, SCHEMA)
    message = str(to_input_error("config/profiles/mine.yaml", error.value))
    assert message.startswith(
        "config/profiles/mine.yaml: training.lr_warmup_steps: 0 is less than the minimum of 1"
    )
    profile["training"]["lr_warmup_steps"] = 1
    jsonschema.validate(profile, SCHEMA)
